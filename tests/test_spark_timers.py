"""Timers and watermarks under Spark, on every backend: a job with event-time windows and
processing-time timers (``conformance_tests.timer_workload``) run epoch by epoch with
``process_keyed(event_time=..., watermark_delay=...)``, checked against the plain-Python oracle
epoch by epoch, across a rescale 4 -> 3 -> 8, a replayed epoch and late rows; and a streaming
query whose heartbeat keeps processing time moving while its input is quiet."""
from __future__ import annotations

import datetime
import time

import pytest

from statekit.conformance_tests.compare import assert_same_rows
from statekit.conformance_tests.timer_workload import (
    EPOCH_MS, T0, WATERMARK_DELAY, WindowCountFunction, make_timed_epochs, timer_oracle,
)
from statekit.runtime.event_time import LATE_ROWS, MAX_EVENT_TIME, WATERMARK, LateRows
from statekit.spark import latest_checkpoint, process_keyed, process_keyed_stream
from statekit.spi import ConfigurationError

pytestmark = pytest.mark.spark

INPUT = "key string, ts long"
OUTPUT = "kind string, key string, ts long, n long"


def _rows(out: list) -> list[tuple]:
    return [tuple(r) for r in out]


def _run(spark, rows, job_id: str, epoch_number: int, epoch: int | None = None):
    from statekit.spark import KeyedJob

    df = spark.createDataFrame(rows, INPUT) if rows else spark.createDataFrame([], INPUT)
    job = KeyedJob.create(spark, df.schema, "key", WindowCountFunction(), OUTPUT, "keyed-process", job_id, None,
                          "ts", WATERMARK_DELAY)
    return _rows(job.run_epoch(df, epoch=epoch, processing_time_ms=T0 + epoch_number * EPOCH_MS).collect())


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb", "sqlite"])
def test_windows_and_timers_match_the_oracle_across_rescales_and_a_replay(spark, statekit_settings, tmp_path,
                                                                          backend):
    epochs = make_timed_epochs(9, 200, 40, seed=21)
    expected = timer_oracle(epochs)
    settings = {"backend": backend, "checkpoint.storage": "filesystem",
                "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 4}
    statekit_settings(settings)
    job_id = f"timers-{backend}"
    late_total = 0
    for number, rows in enumerate(epochs):
        if number in (3, 6):
            statekit_settings({**settings, "parallelism": {3: 3, 6: 8}[number]})
        found = _run(spark, rows, job_id, number)
        assert_same_rows(found, expected[number], f"{backend}, epoch {number + 1}")
        latest, _ = latest_checkpoint(spark, job_id)
        late_total += latest.metadata.properties[LATE_ROWS]
        if number == 4:  # run epoch 5 again, as Spark replays a micro-batch: same watermark, same timers
            again = _run(spark, rows, job_id, number, epoch=number + 1)
            assert sorted(again, key=repr) == sorted(found, key=repr), f"{backend}: the replayed epoch 5 differs"
    assert late_total > 0, "the workload has late rows, which are dropped and counted"
    properties = latest.metadata.properties
    assert properties[MAX_EVENT_TIME] == max(ts for rows in epochs for _, ts in rows)
    assert properties[WATERMARK] < properties[MAX_EVENT_TIME]


def test_a_timestamp_column_is_event_time_and_bad_columns_are_refused(spark, statekit_settings, tmp_path):
    statekit_settings({"backend": "heap", "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 2})
    base = datetime.datetime(2024, 1, 1, 12, 0, 0)
    first = spark.createDataFrame([("a", base), ("a", base + datetime.timedelta(seconds=5))], "key string, ts timestamp")
    second = spark.createDataFrame([("a", base + datetime.timedelta(seconds=9))], "key string, ts timestamp")
    outputs = [process_keyed(df, "key", WindowCountFunction(), OUTPUT, job_id="timestamps", event_time="ts",
                             watermark_delay="1 second", processing_time_ms=T0).collect() for df in (first, second)]
    assert outputs[0] == [], "no window can close in the first epoch: its watermark is the minimum"
    end = int(base.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
    assert sorted(_rows(outputs[1])) == [("window", "a", end + 999, 1)], \
        "epoch 2's watermark (5 s - 1 s after the first row) closes the first second's window only"
    with pytest.raises(ConfigurationError, match="event_time column 'key' is string"):
        process_keyed(first, "key", WindowCountFunction(), OUTPUT, job_id="bad", event_time="key",
                      watermark_delay="1 second")
    with pytest.raises(ConfigurationError, match="event_time and watermark_delay go together"):
        process_keyed(first, "key", WindowCountFunction(), OUTPUT, job_id="bad", event_time="ts")
    with pytest.raises(ConfigurationError, match="watermark_delay must be a duration"):
        process_keyed(first, "key", WindowCountFunction(), OUTPUT, job_id="bad", event_time="ts",
                      watermark_delay="soon")


def test_a_heartbeat_fires_processing_time_timers_while_the_input_is_quiet(spark, statekit_settings, tmp_path):
    """One file of rows, then nothing: without the heartbeat Spark would run no more micro-batches
    and the rows' processing-time timers (one minute after their batch) would never fire."""
    statekit_settings({"backend": "heap", "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 2})
    source = tmp_path / "in"
    source.mkdir()
    (source / "1.json").write_text('{"key": "a", "ts": 1}\n{"key": "b", "ts": 2}\n')
    stream = spark.readStream.schema(INPUT).json(str(source))
    seen: list[tuple] = []
    query = process_keyed_stream(stream, "key", quick_idle(), OUTPUT,
                                 sink=lambda df, batch_id: seen.extend(_rows(df.collect())),
                                 checkpoint_location=str(tmp_path / "query"), job_id="heartbeat",
                                 heartbeat="200 milliseconds")
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len([r for r in seen if r[0] == "idle"]) < 2:
            time.sleep(0.5)
            assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert sorted(r[1] for r in seen if r[0] == "idle") == ["a", "b"], seen


def quick_idle() -> WindowCountFunction:
    """The workload with only a processing-time timer, one second after a row's micro-batch
    (defined in a function, so Spark's workers get the class by value)."""

    class QuickIdle(WindowCountFunction):
        def process(self, row, ctx):
            timers = ctx.timer_service()
            timers.register_processing_time_timer(timers.current_processing_time() + 1000)

    return QuickIdle()


def test_event_times_before_1970_round_down_to_the_millisecond_as_in_the_local_runner():
    import pyarrow as pa

    from statekit.runtime.event_time import event_time_ms
    from statekit.spark.event_time import EventTimeTracker, SubtaskEventTime

    times = [datetime.datetime(1969, 12, 31, 23, 59, 59, 999_500), datetime.datetime(1970, 1, 1, 0, 0, 0, 500)]
    for tz in (None, "UTC"):
        batch = pa.RecordBatch.from_pydict({"ts": pa.array(times, pa.timestamp("us", tz))})
        tracker = EventTimeTracker(SubtaskEventTime("ts", -1, LateRows.DROP), lambda b: pa.array([True] * b.num_rows))
        kept = list(tracker.filtered(iter([batch])))
        # -0.5 ms is millisecond -1 (Spark's floor, and event_time_ms's): at the watermark -1, late
        assert event_time_ms(times[0]) == -1
        assert (tracker.late_rows, sum(b.num_rows for b in kept), tracker.max_event_time_ms) == (1, 1, 0), tz


@pytest.mark.parametrize("column_type", ["timestamp", "timestamp_ntz"])
def test_windows_over_a_timestamp_column_start_and_end_at_timestamps(spark, statekit_settings, tmp_path,
                                                                     column_type):
    """As Spark's window() does, a window job over a TIMESTAMP (or TIMESTAMP_NTZ) event-time column gives
    its windows' start and end in that type, not as epoch-millisecond longs; an epoch-millisecond
    column keeps longs."""
    from statekit import windows

    statekit_settings({"backend": "heap", "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 2})
    utc = datetime.timezone.utc
    base = datetime.datetime(2024, 1, 1, 12, 0, 0, tzinfo=utc)
    given = base if column_type == "timestamp" else base.replace(tzinfo=None)
    count = windows.aggregate(windows.TumblingWindows.of("10 seconds"), windows.Count(), timestamp="ts")
    job = f"timestamp-windows-{column_type}"
    output = f"key string, start {column_type}, end {column_type}, n long"
    later = given + datetime.timedelta(minutes=1)
    epochs = [[("a", given), ("a", given + datetime.timedelta(seconds=3))], [("b", later)], [("b", later)]]
    found = [process_keyed(spark.createDataFrame(rows, f"key string, ts {column_type}"), "key", count, output,
                           job_id=job, event_time="ts", watermark_delay="1 second").collect() for rows in epochs]
    assert found[:2] == [[], []], "the watermark passes the window's end in the third epoch"
    [(key, start, end, n)] = found[2]
    if column_type == "timestamp":  # PySpark gives TIMESTAMP values as naive datetimes in the session's time zone
        session = spark.conf.get("spark.sql.session.timeZone")
        import zoneinfo
        start, end = (t.replace(tzinfo=zoneinfo.ZoneInfo(session)) for t in (start, end))
    assert (key, start, end, n) == ("a", given, given + datetime.timedelta(seconds=10), 2)
    millis = spark.createDataFrame([("a", 5), ("a", 60_000)], "key string, ts long")
    assert process_keyed(millis, "key", count, "key string, start long, end long, n long", job_id=f"{job}-ms",
                         event_time="ts", watermark_delay="0 ms").collect() == []


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_a_bounded_sessionization_emits_every_session_in_one_call_at_the_end_of_input(spark, statekit_settings,
                                                                                   tmp_path, backend):
    """``process_keyed(..., end_of_input=True)`` over a finished input: every session comes out of
    the one call (the watermark moves to the largest timestamp after the rows), where without it
    none does (the watermark has not moved yet); the checkpoint records that watermark, so a later
    epoch counts every row late."""
    import random

    from statekit import windows
    from statekit.spi.timers import MAX_TIMESTAMP

    statekit_settings({"backend": backend, "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 3})
    rng = random.Random(5)
    rows = [(f"user{rng.randrange(8)}", T0 + rng.randrange(600_000)) for _ in range(500)]
    gap = 20_000
    expected = []
    for user in sorted({user for user, _ in rows}):
        times = sorted(ts for u, ts in rows if u == user)
        start = end = None
        count = 0
        for ts in times:
            if start is not None and ts < end:
                end, count = max(end, ts + gap), count + 1
                continue
            if start is not None:
                expected.append((user, start, end, count))
            start, end, count = ts, ts + gap, 1
        expected.append((user, start, end, count))
    sessions = windows.aggregate(windows.SessionWindows.with_gap("20 seconds"), windows.Count(), timestamp="ts")
    output = "user string, start long, end long, n long"
    df = spark.createDataFrame(rows, "user string, ts long")
    kept_open = process_keyed(df, "user", sessions, output, job_id=f"sessions-open-{backend}", event_time="ts",
                              watermark_delay="1 minute").collect()
    assert kept_open == []
    job = f"sessions-{backend}"
    found = process_keyed(df, "user", sessions, output, job_id=job, event_time="ts", watermark_delay="1 minute",
                          end_of_input=True).collect()
    assert_same_rows(_rows(found), expected, f"{backend}: every session in one call")
    latest, _ = latest_checkpoint(spark, job)
    assert latest.metadata.properties[WATERMARK] == MAX_TIMESTAMP
    process_keyed(df.limit(3), "user", sessions, output, job_id=job, event_time="ts", watermark_delay="1 minute")
    latest, _ = latest_checkpoint(spark, job)
    assert latest.metadata.properties[LATE_ROWS] == 3


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_a_count_trigger_on_global_windows_counts_across_epochs_and_a_rescale(spark, statekit_settings, tmp_path,
                                                                           backend):
    """Trigger state under Spark: each key's global window fires and purges on every 3rd row, its
    count kept per window in the backend across epochs, a rescale 3 -> 2 and a restart of the job."""
    import random
    from collections import Counter

    from statekit import windows

    settings = {"backend": backend, "checkpoint.storage": "filesystem",
                "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 3}
    statekit_settings(settings)
    every_third = windows.aggregate(windows.GlobalWindows.create(), windows.Count(),
                                    trigger=windows.PurgingTrigger.of(windows.CountTrigger.of(3)),
                                    emit=lambda key, window, n: (key, n))
    rng = random.Random(9)
    totals: Counter = Counter()
    for number in range(3):
        if number == 2:
            statekit_settings({**settings, "parallelism": 2})
        rows = [(f"k{rng.randrange(5)}",) for _ in range(40)]
        before = dict(totals)
        totals.update(key for key, in rows)
        found = process_keyed(spark.createDataFrame(rows, "k string"), "k", every_third, "k string, n long",
                              job_id=f"count-trigger-{backend}").collect()
        expected = Counter({key: totals[key] // 3 - before.get(key, 0) // 3 for key in totals})
        assert Counter(row["k"] for row in found) == +expected, f"{backend}, epoch {number + 1}"
        assert {row["n"] for row in found} <= {3}


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_windows_judge_late_rows_and_return_them_as_a_side_output(spark, statekit_settings, tmp_path, backend):
    """Under Spark as in the local runner: rows behind the watermark still go into their windows
    within the allowed lateness (no ``late_rows="process"`` needed), and the rows late for all
    their windows come back as the side output, with the input's columns and types (a TIMESTAMP
    too), counted in the checkpoint; across a rescale 3 -> 2."""
    import random

    from statekit import windows
    from statekit.runtime import LocalRunner
    from statekit.runtime.event_time import LATE_ROWS_OUTPUT
    from statekit.spark import KeyedOutput
    from statekit.spi.descriptors import AggregateFunction

    class Sum(AggregateFunction):
        def create_accumulator(self):
            return 0

        def add(self, value, accumulator):
            return accumulator + value

        def get_result(self, accumulator):
            return accumulator

        def merge(self, a, b):
            return a + b

    settings = {"backend": backend, "checkpoint.storage": "filesystem",
                "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 3}
    statekit_settings(settings)
    rng = random.Random(12)
    at = datetime.datetime(2024, 5, 1, 8, 30, tzinfo=datetime.timezone.utc)
    epochs = [[{"k": f"k{rng.randrange(6)}", "ts": T0 + number * 8000 + rng.randrange(-15_000, 5000),
                "v": rng.randrange(100), "at": at + datetime.timedelta(seconds=rng.randrange(1000))}
               for _ in range(60)] for number in range(6)]
    summed = windows.aggregate(windows.TumblingWindows.of("10 seconds"), Sum(), timestamp="ts",
                               value=lambda row: row["v"], allowed_lateness="4 seconds")
    local = LocalRunner(summed, lambda row: row["k"], parallelism=2, event_time="ts", watermark_delay="2 seconds",
                        late_rows="side_output")
    schema = "k string, ts long, v long, at timestamp"
    late_total = 0
    for number, rows in enumerate(epochs):
        if number == 3:
            statekit_settings({**settings, "parallelism": 2})
        result = process_keyed(spark.createDataFrame([tuple(r.values()) for r in rows], schema), "k", summed,
                               "k string, start long, end long, total long", job_id=f"late-windows-{backend}",
                               event_time="ts", watermark_delay="2 seconds", late_rows="side_output")
        assert isinstance(result, KeyedOutput)
        assert result.late.schema.simpleString() == "struct<k:string,ts:bigint,v:bigint,at:timestamp>"
        expected = local.run_epoch(rows)
        assert_same_rows(_rows(result.output.collect()), expected, f"{backend}, epoch {number + 1}")
        late = [row.asDict() for row in result.late.collect()]
        for row in late:  # PySpark gives a TIMESTAMP as a naive datetime in the session's time zone
            row["at"] = row["at"].astimezone(datetime.timezone.utc)
        assert_same_rows([tuple(r.values()) for r in late], [tuple(r.values()) for r in local.late_output],
                         f"{backend}, late rows of epoch {number + 1}")
        latest, _ = latest_checkpoint(spark, f"late-windows-{backend}")
        assert latest.metadata.properties[LATE_ROWS_OUTPUT] == len(late)
        late_total += len(late)
    assert late_total > 0
    behind = sum(1 for number, rows in enumerate(epochs[1:], 1) for row in rows
                 if row["ts"] <= max(r["ts"] for r in epochs[number - 1]) - 2000)
    assert behind > late_total, "rows behind the watermark within the lateness went into their windows"


def test_a_streaming_query_gives_its_late_rows_to_the_late_sink(spark, statekit_settings, tmp_path):
    """A function that does not judge lateness: rows at or behind the watermark by their own
    timestamp go to ``late_sink`` with their micro-batch's id; the query refuses a side output
    without a late sink."""
    from statekit.runtime.function import KeyedProcessFunction

    class Echo(KeyedProcessFunction):
        def process(self, row, ctx):
            yield row["key"], row["ts"]

    statekit_settings({"backend": "heap", "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 2})
    source = tmp_path / "in"
    source.mkdir()
    stream = spark.readStream.schema(INPUT).option("maxFilesPerTrigger", 1).json(str(source))
    with pytest.raises(ConfigurationError, match="late_sink go together"):
        process_keyed_stream(stream, "key", Echo(), "key string, ts long", sink=lambda df, batch_id: None,
                             checkpoint_location=str(tmp_path / "refused"), job_id="late-refused", event_time="ts",
                             watermark_delay="0 ms", late_rows="side_output")
    (source / "1.json").write_text('{"key": "a", "ts": 100}\n{"key": "b", "ts": 50}\n')
    (source / "2.json").write_text('{"key": "c", "ts": 100}\n{"key": "d", "ts": 101}\n{"key": "e", "ts": 7}\n')
    seen: list[tuple] = []
    late: list[tuple] = []
    query = process_keyed_stream(stream, "key", Echo(), "key string, ts long",
                                 sink=lambda df, batch_id: seen.extend(_rows(df.collect())),
                                 late_sink=lambda df, batch_id: late.extend((batch_id, *r) for r in df.collect()),
                                 checkpoint_location=str(tmp_path / "query"), job_id="late-stream", event_time="ts",
                                 watermark_delay="0 ms", late_rows="side_output", trigger={"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    assert sorted(seen) == [("a", 100), ("b", 50), ("d", 101)]
    assert sorted(late) == [(1, "c", 100), (1, "e", 7)], "the second micro-batch's watermark is 100"


def test_rows_late_by_a_timestamp_come_back_whatever_the_session_time_zone(spark, statekit_settings, tmp_path):
    """Spark hands a subtask timestamps in the session's time zone: the rows found late by their
    timestamp still come back as the side output, the same instants."""
    from statekit.runtime.function import KeyedProcessFunction
    from statekit.spark import KeyedOutput

    class Echo(KeyedProcessFunction):
        def process(self, row, ctx):
            yield row["key"], row["ts"]

    statekit_settings({"backend": "heap", "checkpoint.storage": "filesystem", "parallelism": 2,
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri()})
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        utc = datetime.timezone.utc
        at = [datetime.datetime(2024, 6, 1, 12, minute, tzinfo=utc) for minute in range(4)]
        schema = "key string, ts timestamp"
        process_keyed(spark.createDataFrame([("a", at[2])], schema), "key", Echo(), schema, job_id="zones",
                      event_time="ts", watermark_delay="0 ms", late_rows="side_output")
        result = process_keyed(spark.createDataFrame([("b", at[1]), ("c", at[3])], schema), "key", Echo(), schema,
                               job_id="zones", event_time="ts", watermark_delay="0 ms", late_rows="side_output")
        assert isinstance(result, KeyedOutput)
        late = result.late.selectExpr("key", "unix_micros(ts) AS micros").collect()
        assert [(row.key, row.micros) for row in late] == [("b", int(at[1].timestamp() * 1_000_000))]
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
