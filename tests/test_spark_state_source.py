"""Reading state under Spark: format("statekit") on every backend's checkpoints equals the job's
oracle state key by key; a key filter reads one key group in one partition; typed columns; the
change feed; format("statekit-metadata"); checkpoints on S3 (moto); and a bootstrapped savepoint
of 1M keys (statekit.spark.write_savepoint) restored into every backend at two parallelisms and
continued by a job."""
from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import uuid
from collections import defaultdict
from typing import Any, Optional

import pytest
from pyspark import cloudpickle
from pyspark.sql import Row

from statekit.conformance_tests.s3 import DEFAULT_BUCKET, moto_s3  # noqa: F401 - a session-scoped fixture
from statekit.conformance_tests.workload import COUNT, SUMS, WorkloadFunction, make_rows, oracle

pytestmark = pytest.mark.spark
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # its dataclasses reach the executors' workers

SCHEMA = "key string, category string, amount long"


@pytest.fixture(autouse=True)
def data_sources(spark):
    """The sources are registered with the session (importing statekit.spark does it only when
    a session is active then; every statekit job does it for its own)."""
    from statekit.spark import register_data_sources

    register_data_sources(spark)
OUTPUT = "key string, count long"


def _run_job(spark: Any, epochs: list[list[tuple]], job_id: str) -> None:
    import statekit.spark as sks

    for rows in epochs:
        sks.process_keyed(spark.createDataFrame(rows, SCHEMA), "key", WorkloadFunction(), OUTPUT, job_id=job_id)


def state_of(rows: list[Any]) -> dict[str, dict[str, Any]]:
    """The workload's state per key from the data source's rows (values as JSON text)."""
    found: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "last": [], "sums": {}, "max": None,
                                                           "mean": [0, 0]})
    for row in rows:
        assert row.error is None, row
        s, value = found[row.key], json.loads(row.value)
        if row.state == "last":
            s["last"].append(value)
        elif row.state == "sums":
            s["sums"][row.user_key] = value
        else:
            s[row.state] = value
    return dict(found)


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb", "sqlite"])
def test_a_jobs_state_reads_back_as_its_oracle(spark, statekit_settings, tmp_path, backend):
    statekit_settings(backend=backend, parallelism="3", **{"checkpoint.storage": "filesystem",
                                                           "checkpoint.dir": f"file://{tmp_path}/checkpoints",
                                                           "checkpoint.incremental": "true"})
    epochs = [make_rows(1500, 300, seed) for seed in (1, 2)]
    _run_job(spark, epochs, "read-back")
    expected = oracle(epochs[0] + epochs[1])
    state = spark.read.format("statekit").load(f"file://{tmp_path}/checkpoints/read-back")
    # lists come back in order within a partition: each partition reads its key groups in order
    assert state_of(state.orderBy("key_group").collect()) == expected
    assert state.rdd.getNumPartitions() == 3

    one = state.filter("key = 'key-7'")
    assert one.rdd.getNumPartitions() == 1, "a filter on the key reads only its key group"
    assert state_of(one.collect()) == {"key-7": expected["key-7"]}

    counts = (spark.read.format("statekit").option("checkpoint-dir", f"file://{tmp_path}/checkpoints")
              .option("job", "read-back").option("checkpoint-id", "1").option("state", "count").load())
    assert counts.columns[:2] == ["key", "key_group"] and counts.schema["key"].dataType.simpleString() == "string"
    assert counts.schema["value"].dataType.simpleString() == "bigint", "typed by its Int64Serializer"
    assert {r.key: r.value for r in counts.collect()} == {k: s["count"] for k, s in oracle(epochs[0]).items()}


def test_the_change_feed_and_the_metadata_source(spark, statekit_settings, tmp_path):
    statekit_settings(backend="rocksdb", parallelism="2", **{"checkpoint.storage": "filesystem",
                                                             "checkpoint.dir": f"file://{tmp_path}/checkpoints",
                                                             "checkpoint.incremental": "true"})
    first, second = make_rows(1000, 200, 3), make_rows(300, 400, 4)
    _run_job(spark, [first], "feed")
    statekit_settings(parallelism="4")  # a rescale between the two checkpoints
    _run_job(spark, [second], "feed")
    feed = (spark.read.format("statekit").option("changes-from", "1").option("changes-to", "2")
            .option("state", "count").load(f"file://{tmp_path}/checkpoints/feed"))
    before, after = oracle(first), oracle(first + second)
    assert {(r.key, r.value, r.change) for r in feed.collect()} == {
        (k, s["count"], "put") for k, s in after.items() if before.get(k, {}).get("count") != s["count"]}

    metadata = spark.read.format("statekit-metadata").load(f"file://{tmp_path}/checkpoints/feed").collect()
    assert sorted({(r.checkpoint_id, r.parallelism) for r in metadata}) == [(1, 2), (2, 4)]
    by_state = {(r.checkpoint_id, r.state): r for r in metadata}
    assert by_state[(2, "sums")].kind == "map" and by_state[(2, "sums")].serializers["user_key"] == "StringSerializer"
    assert by_state[(2, "epochs")].kind == "operator-union"
    assert by_state[(1, "count")].recovery == {"0": "fresh", "1": "fresh"} and by_state[(2, "count")].backend == "rocksdb"
    assert by_state[(2, "count")].snapshot_size > 0


def test_the_metadata_source_refuses_a_directory_that_is_not_a_checkpoint_directory_at_load(spark, tmp_path):
    """As format("statekit") does: a statekit error naming the path and what a checkpoint directory
    holds, when the DataFrame is made on the driver, not an AssertionError in a task. A job
    directory whose checkpoints never completed is one: it reads as no rows."""
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not statekit's")
    for source in ("statekit", "statekit-metadata"):
        with pytest.raises(Exception, match=r"RestoreError: .*path='[^']*other'.*(no completed checkpoint|is not a "
                                            r"checkpoint directory.*chk-<n>/_metadata)") as caught:
            spark.read.format(source).load(str(tmp_path / "other")).columns  # Spark Connect: resolved here
        assert "AssertionError" not in str(caught.value)
    (tmp_path / "job" / "chk-1").mkdir(parents=True)
    assert spark.read.format("statekit-metadata").load(str(tmp_path / "job")).collect() == []


def test_state_on_s3_reads_back(spark, moto_s3):  # noqa: F811 - the fixture
    from statekit.backends.lmdb import LMDBStateBackend
    from statekit.registry import storage_class
    from statekit.runtime.local_runner import LocalRunner

    root = f"s3://{DEFAULT_BUCKET}/{uuid.uuid4().hex}"
    # the checkpoints are written on S3 by the local runner (incremental LMDB: a changelog chain)
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, state_backend=LMDBStateBackend(),
                         storage=storage_class("filesystem")(root, storage_options=moto_s3.storage_options),
                         job_id="on-s3", incremental=True)
    epochs = [make_rows(800, 100, 5), make_rows(200, 100, 6)]
    for rows in epochs:
        runner.run_epoch(rows)
    state = (spark.read.format("statekit").option("storage-options", json.dumps(moto_s3.storage_options))
             .load(f"{root}/on-s3"))
    assert state_of(state.orderBy("key_group").collect()) == oracle(epochs[0] + epochs[1])


KEYS = 1_000_000


@pytest.fixture(scope="module")
def bootstrapped(spark, tmp_path_factory):
    """A savepoint of KEYS keys written from a DataFrame: a count and a map entry per key."""
    from pyspark.sql import functions as F

    import statekit.spark as sks

    directory = tmp_path_factory.mktemp("bootstrap")
    df = spark.range(KEYS).select(F.concat(F.lit("key-"), F.col("id").cast("string")).alias("key"),
                                  (F.col("id") % 7).alias("count"),
                                  F.create_map(F.lit("a"), F.col("id") % 100).alias("sums"))
    url = sks.write_savepoint(df, "key", {"count": COUNT, "sums": SUMS}, job_id="bootstrapped",
                              savepoint_dir=f"file://{directory}", parallelism=4, max_parallelism=256)
    return url, directory


def _bootstrap_state(key: str) -> dict[str, Any]:
    n = int(key.split("-")[1])
    return {"count": n % 7, "last": [], "sums": {"a": n % 100}, "max": None, "mean": [0, 0]}


@pytest.mark.parametrize("backend,parallelism", [("heap", 3), ("rocksdb", 3), ("lmdb", 3),
                                                 ("heap", 8), ("rocksdb", 8), ("lmdb", 8)])
def test_a_bootstrapped_savepoint_restores_and_continues(spark, statekit_settings, bootstrapped, backend,
                                                         parallelism):
    from pyspark.sql import functions as F

    import statekit.spark as sks

    url, directory = bootstrapped
    job = f"continued-{backend}-{parallelism}"
    statekit_settings(backend=backend, parallelism=str(parallelism), **{
        "checkpoint.storage": "filesystem", "checkpoint.dir": f"file://{directory}/checkpoints",
        "checkpoint.incremental": "true", "restore.path": url})
    rows = [(f"key-{n}", "a" if n % 2 else "b", n % 50) for n in range(0, KEYS, 997)] * 2
    out = sks.process_keyed(spark.createDataFrame(rows, SCHEMA), "key", WorkloadFunction(), OUTPUT, job_id=job)
    # the function emits each row's running count: the bootstrapped count plus the rows so far
    assert sorted(out.collect()) == sorted(
        (key, _bootstrap_state(key)["count"] + i) for key in {r[0] for r in rows} for i in (1, 2))

    state = spark.read.format("statekit").load(f"file://{directory}/checkpoints/{job}")
    counts = state.filter("state = 'count'").agg(F.count("*"), F.sum(F.col("value").cast("long"))).first()
    assert tuple(counts) == (KEYS, sum(n % 7 for n in range(KEYS)) + len(rows))
    touched = {r[0] for r in rows}
    sample = sorted(touched)[:5] + ["key-1", "key-999998"]
    found = state_of(state.filter(F.col("key").isin(sample)).orderBy("key_group").collect())
    expected = oracle([r for r in rows if r[0] in sample], into={key: _bootstrap_state(key) for key in sample})
    assert found == expected


def test_restoring_state_keyed_by_other_key_types_is_refused(spark, statekit_settings, tmp_path):
    """A savepoint bootstrapped with an int key column restored by a job whose key column is a
    bigint: the two hash to other key groups, so each key's state would silently not be found."""
    from pyspark.sql import functions as F

    import statekit.spark as sks
    from statekit import KeyedProcessFunction, ValueStateDescriptor
    from statekit.serializers import Int64Serializer
    from statekit.spi import ConfigurationError

    count = ValueStateDescriptor("count", Int64Serializer())

    class Read(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(count)

        def process(self, row, ctx):
            yield ctx.current_key, self.count.value()

    users = spark.range(20).select(F.col("id").cast("int").alias("user"), (F.col("id") * 10).alias("count"))
    url = sks.write_savepoint(users, "user", {"count": count}, job_id="typed", savepoint_dir=f"file://{tmp_path}/sp",
                              parallelism=2)
    statekit_settings(**{"checkpoint.storage": "filesystem", "checkpoint.dir": f"file://{tmp_path}/checkpoints",
                         "restore.path": url, "parallelism": "2"})
    with pytest.raises(ConfigurationError, match=r"types \['int'\].*types \['bigint'\].*Cast the key columns"):
        sks.process_keyed(spark.range(20).withColumnRenamed("id", "user"), "user", Read(), "user long, count long",
                          job_id="typed")
    out = sks.process_keyed(spark.range(20).select(F.col("id").cast("smallint").alias("user")), "user", Read(),
                            "user long, count long", job_id="typed")  # a smallint hashes as an int does
    assert sorted(tuple(r) for r in out.collect()) == [(i, i * 10) for i in range(20)]


@dataclasses.dataclass
class Place:
    lat: float
    lon: float
    seen: datetime.datetime
    label: Optional[str] = None


def test_record_state_is_bootstrapped_from_struct_columns_and_reads_back_as_a_struct_column(spark, tmp_path):
    """A RecordSerializer's values: written by write_savepoint from a struct column, read by
    format("statekit") as a struct column of the record's schema (not as text)."""
    import statekit.spark as sks
    from statekit import ValueStateDescriptor
    from statekit.serializers.record import RecordSerializer

    places = ValueStateDescriptor("place", RecordSerializer(Place))
    seen = datetime.datetime(2026, 11, 28, 10, 0, tzinfo=datetime.timezone.utc)
    rows = [(f"user-{i}", (float(i), -float(i), seen + datetime.timedelta(minutes=i), None if i % 2 else f"p{i}"))
            for i in range(20)]
    df = spark.createDataFrame(rows, "key string, place struct<lat: double, lon: double, seen: timestamp, "
                                     "label: string>")
    url = sks.write_savepoint(df, "key", {"place": places}, job_id="places", savepoint_dir=f"file://{tmp_path}",
                              parallelism=2, max_parallelism=128)
    state = spark.read.format("statekit").option("state", "place").load(url)
    assert state.schema["value"].dataType.simpleString() == "struct<lat:double,lon:double,seen:timestamp,label:string>"
    # collect() gives a timestamp as the local wall-clock time, so instants compare by .timestamp()
    found = {r.key: (r.value.lat, r.value.lon, r.value.seen.timestamp(), r.value.label)
             for r in state.select("key", "value").collect()}
    assert found == {key: (lat, lon, at.timestamp(), label) for key, (lat, lon, at, label) in rows}
    assert state.where("value.lat > 17").select("key").orderBy("key").collect() == [Row(key="user-18"),
                                                                                   Row(key="user-19")]


def test_the_metadata_source_reads_history_and_key_groups_on_s3_as_the_cli_prints_them(spark, moto_s3, capsys):  # noqa: F811
    from statekit.cli import main
    from test_checkpoint_history import rescaled_incremental_job

    root = f"s3://{DEFAULT_BUCKET}/{uuid.uuid4().hex}"
    rescaled_incremental_job(root, moto_s3.storage_options)
    def read():  # a reader keeps the options it was given: a new one each time
        return spark.read.format("statekit-metadata").option("storage-options", json.dumps(moto_s3.storage_options))

    history = read().option("table", "history").load(root).orderBy("checkpoint_id").collect()
    options = [f"-o{key}={json.dumps(value) if isinstance(value, dict) else value}"
               for key, value in moto_s3.storage_options.items()]
    assert main(["checkpoints", "history", root, "--json", *options]) == 0
    printed = json.loads(capsys.readouterr().out)["checkpoints"]
    columns = ("checkpoint_id", "parallelism", "kind", "state_size", "bytes_reused", "rows_in", "state_entries",
               "state_entries_exact", "live_state_bytes", "timers_pending")
    assert [tuple(r[c] for c in columns) for r in history] == [tuple(p[c] for c in columns) for p in printed]
    assert all(r.state_entries > 0 and r.live_state_bytes > 0 and r.timers_pending == 0 for r in history)
    assert [r.checkpoint_id for r in history] == [1, 2, 3, 4, 5, 6]
    assert history[3].restore_sources == {"storage": 4}
    key_groups = read().option("table", "key_groups").load(f"{root}/history").collect()
    assert {r.checkpoint_id for r in key_groups} == {5, 6}, "the two retained checkpoints"
    assert len(key_groups) == 2 * 128 and {r.subtask for r in key_groups} == {0, 1, 2, 3}
    default = read().load(f"{root}/history").columns
    assert "state" in default and "key_group" not in default, "the default table is as before"
    with pytest.raises(Exception, match=r"table='nope' is not a table: choose one of \['history', 'key_groups'"):
        read().option("table", "nope").load(root).columns
