"""Two inputs under Spark, on every backend, against the plain-Python recomputations of
``examples/two_input_pipelines.py``: orders and payments (``process_connected``, each input with its own
event time and delay) and thresholds broadcast mid-run (``process_broadcast``), each across a
task failure, a new run per epoch (as a restarted driver: every epoch restores from the
checkpoint), rescales 4 -> 3 -> 8 and a backend switch through a savepoint; a replayed epoch of
two inputs; the same jobs as streaming queries of two sources; and the errors of the entry points."""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
from pyspark import cloudpickle

from statekit import joins
from statekit.conformance_tests.compare import assert_same_rows
from statekit.runtime.event_time import INPUT_EVENT_TIMES
from statekit.spark import (
    latest_checkpoint, process_broadcast, process_broadcast_stream, process_connected, process_connected_stream,
    savepoint,
)
from statekit.spi import ConfigurationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import two_input_pipelines  # noqa: E402
from two_input_pipelines import (  # noqa: E402
    ORDER_ALERTS, ORDERS, PAYMENTS, READINGS, RULES, SENSOR_ALERTS, ThresholdAlerts, UnpaidOrders, order_epochs,
    recompute_alerts, recompute_orders, sensor_epochs, with_placeholders, write_batches, write_order_batches,
    CLICK_PAIRS, CLICKS, IMPRESSIONS, ad_epochs, click_pair, recompute_interval_join,
)

pytestmark = pytest.mark.spark
cloudpickle.register_pickle_by_value(two_input_pipelines)  # Spark's workers need not import the examples
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SWITCH = {"heap": "rocksdb", "rocksdb": "lmdb", "lmdb": "heap"}
DELAYS = {"left": "5 minutes", "right": "1 minute"}


def _frames(spark, records):
    """The left and right DataFrames of an epoch's ("left", row) / ("right", row) records."""
    left = [(r["order_id"], r["ts"], r["amount"]) for side, r in records if side == "left"]
    right = [(r["order_id"], r["ts"], r["method"]) for side, r in records if side == "right"]
    return spark.createDataFrame(left, ORDERS), spark.createDataFrame(right, PAYMENTS)


def failing_once(function, method: str, marker: str):
    """``function`` whose ``method`` fails once, in whichever task calls it first (the marker file
    says it did); Spark retries the task."""
    base = type(function)

    def fail_once(self, row, ctx):
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected task failure")
        return getattr(base, method)(self, row, ctx)

    failing = copy.copy(function)
    failing.__class__ = type(f"FailingOnce{base.__name__}", (base,), {method: fail_once})
    return failing


def _each_epoch(spark, statekit_settings, tmp_path, backend, job, epochs, expected, process):
    """``process(job, epoch, fail)`` for each epoch, a new run each time (as a restarted driver, it
    restores from the checkpoint), its rows checked against ``expected``: a task fails once in
    epoch 2 (``fail`` is true there), the parallelism goes 4 -> 3 -> 8 in epochs 3 and 4, and
    epoch 5 switches to another backend through a savepoint (pending timers, buffers, broadcast
    state and all). Returns the job id of the last epochs."""
    settings = {"backend": backend, "checkpoint.storage": "filesystem", "parallelism": 4, "max-parallelism": 64,
                "checkpoint.dir": (tmp_path / "checkpoints").as_uri(),
                "savepoint.dir": (tmp_path / "savepoints").as_uri()}
    statekit_settings(settings)
    for number, epoch in enumerate(epochs):
        if number in (2, 3):
            statekit_settings({**settings, "parallelism": {2: 3, 3: 8}[number]})
        if number == 4:
            url = savepoint(spark, job)
            statekit_settings({**settings, "backend": SWITCH[backend], "parallelism": 3, "restore.path": url})
            job = f"{job}-switched"
        assert_same_rows([tuple(row) for row in process(job, epoch, number == 1)], expected[number],
                         f"{backend}, epoch {number + 1}")
    return job


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_orders_and_payments_under_spark_match_the_recomputation(spark, statekit_settings, tmp_path, backend):
    epochs = order_epochs(n_epochs=6, orders_per_epoch=25, seed=5)
    expected = recompute_orders(epochs)
    marker = str(tmp_path / "failed-once")

    def process(job, records, fail):
        function = failing_once(UnpaidOrders(), "process_right", marker) if fail else UnpaidOrders()
        left, right = _frames(spark, records)
        return process_connected(left, right, "order_id", function, ORDER_ALERTS, job_id=job, event_time="ts",
                                 watermark_delay=DELAYS).collect()

    job = _each_epoch(spark, statekit_settings, tmp_path, backend, f"orders-{backend}", epochs, expected, process)
    assert os.path.exists(marker), "the injected failure happened"
    assert sum(map(len, expected)) > 100
    latest, _ = latest_checkpoint(spark, job)
    assert latest.metadata.properties[INPUT_EVENT_TIMES] == [
        max(r["ts"] for e in epochs for s, r in e if s == side) for side in ("left", "right")]


def test_a_replayed_epoch_of_two_inputs_fires_the_same_timers(spark, statekit_settings, tmp_path):
    """Epoch 4 run again, as Spark replays a micro-batch: it restores checkpoint 3, so it has the
    same watermark of both inputs, fires the same timers, gives the same output and leaves the
    same state."""
    from statekit.reading.snapshot_reader import SnapshotReader
    from statekit.spark import KeyedJob
    from statekit.spark.inputs import connected

    def state():
        reader = SnapshotReader.open((tmp_path / "checkpoints" / "replay" / "chk-4").as_uri())
        return sorted((c.key, c.state, repr(c.namespace), repr(c.user_key), repr(c.value))
                      for i in range(3) for c in reader.cells(reader.operator(), i, 3))

    statekit_settings({"backend": "rocksdb", "checkpoint.storage": "filesystem", "parallelism": 3,
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri()})
    epochs = order_epochs(n_epochs=4, orders_per_epoch=20, seed=9)
    first = []
    for number, records in enumerate(epochs[:4]):
        tagged, keys, inputs = connected(*_frames(spark, records), "order_id")
        job = KeyedJob.create(spark, tagged.schema, keys, UnpaidOrders(), ORDER_ALERTS, "keyed-process", "replay",
                              None, "ts", DELAYS, inputs=inputs)
        first.append(sorted(tuple(r) for r in job.run_epoch(tagged, processing_time_ms=number).collect()))
    before = state()
    again = sorted(tuple(r) for r in job.run_epoch(tagged, epoch=4, processing_time_ms=3).collect())
    assert again == first[3] and any(kind == "unpaid" for _, kind, _ in again)
    assert state() == before and before, "the replay's checkpoint holds the same state, pending timers too"


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_thresholds_broadcast_under_spark_match_the_recomputation(spark, statekit_settings, tmp_path, backend):
    readings, rules = sensor_epochs()
    marker = str(tmp_path / "failed-once")

    def process(job, epoch, fail):
        epoch_readings, epoch_rules = epoch
        df = spark.createDataFrame([(r["sensor"], r["type"], r["value"]) for r in epoch_readings], READINGS)
        broadcast = spark.createDataFrame([(r["type"], r["limit"]) for r in epoch_rules], RULES)
        function = failing_once(ThresholdAlerts(), "process", marker) if fail else ThresholdAlerts()
        return process_broadcast(df, broadcast, "sensor", function, SENSOR_ALERTS, job_id=job).collect()

    # every subtask processes the broadcast rows; ThresholdAlerts reports a rule once (subtask 0)
    _each_epoch(spark, statekit_settings, tmp_path, backend, f"thresholds-{backend}", list(zip(readings, rules)),
                recompute_alerts(readings, rules), process)
    assert os.path.exists(marker), "the injected failure happened"


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_an_interval_join_of_impressions_and_clicks_matches_the_brute_force_recomputation(
        spark, statekit_settings, tmp_path, backend):
    epochs = ad_epochs(n_epochs=5, per_epoch=50, seed=8)
    expected = [[click_pair(*pair) for pair in out]
                for out in recompute_interval_join(epochs, -5_000, 60_000, "left_outer")]
    marker = str(tmp_path / "failed-once")

    def process(job, records, fail):
        clicked = joins.interval_join("ts", "-5 seconds", "1 minute", how="left_outer", join=click_pair)
        function = failing_once(clicked, "process_left", marker) if fail else clicked
        impressions = spark.createDataFrame([tuple(r.values()) for s, r in records if s == "left"], IMPRESSIONS)
        clicks = spark.createDataFrame([tuple(r.values()) for s, r in records if s == "right"], CLICKS)
        return process_connected(impressions, clicks, "ad", function, CLICK_PAIRS, job_id=job, event_time="ts",
                                 watermark_delay="30 seconds").collect()

    _each_epoch(spark, statekit_settings, tmp_path, backend, f"clicks-{backend}", epochs, expected, process)
    assert os.path.exists(marker), "the injected failure happened"
    assert sum(1 for out in expected for _, click in out if click) >= 10


def _order_streams(spark, statekit_settings, tmp_path, backend, seed):
    """Three epochs of orders and payments as two file sources, one file each per micro-batch."""
    statekit_settings({"backend": backend, "checkpoint.storage": "filesystem", "parallelism": 3,
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri()})
    epochs = with_placeholders(order_epochs(n_epochs=3, orders_per_epoch=15, seed=seed))
    write_order_batches(epochs, str(tmp_path / "orders"), str(tmp_path / "payments"))
    return (epochs, *(spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / name))
                      for schema, name in ((ORDERS, "orders"), (PAYMENTS, "payments"))))


def test_two_streaming_sources_are_one_query(spark, statekit_settings, tmp_path):
    """Orders and payments as two file sources of one query: every micro-batch's rows of both
    sources land in its one epoch, and the output equals the recomputation of the same epochs."""
    epochs, orders, payments = _order_streams(spark, statekit_settings, tmp_path, "lmdb", seed=4)
    seen: list[tuple] = []
    query = process_connected_stream(orders, payments, "order_id", UnpaidOrders(), ORDER_ALERTS,
                                     sink=lambda df, batch_id: seen.extend(tuple(r) for r in df.collect()),
                                     checkpoint_location=str(tmp_path / "query"), job_id="orders-stream",
                                     event_time="ts", watermark_delay=DELAYS, trigger={"availableNow": True})
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    expected = [row for rows in recompute_orders(epochs) for row in rows]
    assert sorted(seen) == sorted(expected) and expected


def test_a_broadcast_stream_reaches_every_subtask(spark, statekit_settings, tmp_path):
    """Readings and thresholds as two file sources of one query: each micro-batch's thresholds, in
    the order of ``broadcast_order``, reach every subtask before its readings."""
    statekit_settings({"backend": "heap", "checkpoint.storage": "filesystem", "parallelism": 3,
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri()})
    readings, rules = sensor_epochs(n_epochs=3)
    rules = [sorted(r, key=lambda rule: rule["type"]) or [{"type": "none", "limit": 0}] for r in rules]
    write_batches(str(tmp_path / "readings"), readings)
    write_batches(str(tmp_path / "rules"), rules)
    stream = spark.readStream.schema(READINGS).option("maxFilesPerTrigger", 1).json(str(tmp_path / "readings"))
    broadcast = spark.readStream.schema(RULES).option("maxFilesPerTrigger", 1).json(str(tmp_path / "rules"))
    seen: list[tuple] = []
    query = process_broadcast_stream(stream, broadcast, "sensor", ThresholdAlerts(), SENSOR_ALERTS,
                                     sink=lambda df, batch_id: seen.extend(tuple(r) for r in df.collect()),
                                     checkpoint_location=str(tmp_path / "query"), job_id="rules-stream",
                                     broadcast_order="type", trigger={"availableNow": True})
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    expected = [row for rows in recompute_alerts(readings, rules) for row in rows]
    assert sorted(seen) == sorted(expected)


def test_the_entry_points_refuse_what_they_cannot_run(spark, statekit_settings, tmp_path):
    statekit_settings({"checkpoint.storage": "filesystem", "checkpoint.dir": (tmp_path / "checkpoints").as_uri()})
    orders = spark.createDataFrame([("a", 1, 5)], ORDERS)
    payments = spark.createDataFrame([("a", 2, "card")], PAYMENTS)
    numbered = spark.createDataFrame([(1, 2, "card")], "order_id int, ts long, method string")
    with pytest.raises(ConfigurationError, match="key columns of the two inputs have other types"):
        process_connected(orders, numbered, "order_id", UnpaidOrders(), ORDER_ALERTS, job_id="refused")
    with pytest.raises(ConfigurationError, match="KeyedBroadcastProcessFunction, which takes a keyed and a broadcast"):
        process_connected(orders, payments, "order_id", ThresholdAlerts(), ORDER_ALERTS, job_id="refused")
    with pytest.raises(ConfigurationError, match="which takes two inputs"):
        process_broadcast(orders, payments, "order_id", UnpaidOrders(), ORDER_ALERTS, job_id="refused")
    with pytest.raises(ConfigurationError, match="go together"):
        process_connected(orders, payments, "order_id", UnpaidOrders(), ORDER_ALERTS, job_id="refused",
                          event_time={"left": "ts", "right": None}, watermark_delay="1 minute")
    with pytest.raises(ConfigurationError, match="for jobs of one input"):
        process_connected(orders, payments, "order_id", UnpaidOrders(), ORDER_ALERTS, job_id="refused",
                          event_time="ts", watermark_delay="1 minute", late_rows="side_output")


def test_a_two_input_query_writes_exactly_once_and_its_state_reads_back(spark, statekit_settings, tmp_path):
    """Orders and payments into a transactional Parquet sink, a task failing once on the way: every
    alert is written once; and the job's state (both inputs' cells, one key space) reads back with
    format('statekit'), named by the first input's key column."""
    import pyarrow.dataset as ds

    from statekit.sinks import ParquetFileSink

    epochs, orders, payments = _order_streams(spark, statekit_settings, tmp_path, "rocksdb", seed=6)
    function = failing_once(UnpaidOrders(), "process_right", str(tmp_path / "failed-once"))
    query = process_connected_stream(orders, payments, "order_id", function, ORDER_ALERTS,
                                     sink=ParquetFileSink((tmp_path / "out").as_uri()),
                                     checkpoint_location=str(tmp_path / "query"), job_id="orders-sink",
                                     event_time="ts", watermark_delay=DELAYS, trigger={"availableNow": True})
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    assert (tmp_path / "failed-once").exists()
    table = ds.dataset(str(tmp_path / "out"), format="parquet").to_table()
    written = sorted(zip(*(table.column(c).to_pylist() for c in ("order_id", "kind", "ordered_at"))))
    assert written == sorted(row for rows in recompute_orders(epochs) for row in rows), "each alert exactly once"
    state = spark.read.format("statekit").option("state", "ordered-at").load(
        (tmp_path / "checkpoints" / "orders-sink").as_uri())
    assert state.columns[:2] == ["order_id", "key_group"]
    pending = {row["order_id"] for row in state.collect()}
    assert pending and pending <= {r["order_id"] for records in epochs for s, r in records if s == "left"}, \
        "the orders whose timers are still pending"
