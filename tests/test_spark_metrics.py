"""Per-epoch metrics under Spark: what a job's listener gets, what its checkpoint records, the
log line, and a streaming query's ``lastProgress``, checked against what the job did (rows in and
out, keys, late rows, timers, TTL removals)."""
from __future__ import annotations

import json
import logging

import pytest

from statekit import KeyedProcessFunction, ListStateDescriptor, MapStateDescriptor, StateTtlConfig, ValueStateDescriptor
from statekit.runtime.metrics import LOGGER_NAME, METRICS_PROPERTY, EpochMetrics
from statekit.runtime.timers import USER_TIMERS, timer_state_name
from statekit.spark import latest_checkpoint, process_keyed, process_keyed_stream
from statekit.spark.progress import METRICS_KEY
from statekit.spi.timers import TimeDomain

pytestmark = pytest.mark.spark

INPUT = "key string, ts long"
OUTPUT = "kind string, key string, ts long"
T0 = 1_700_000_000_000


def timed_echo() -> KeyedProcessFunction:
    """Echoes each row, keeps a value with a one-second TTL per key and registers an event-time
    timer at the row's time, which echoes when it fires (defined in a function, so Spark's
    workers get the class by value)."""

    class TimedEcho(KeyedProcessFunction):
        def open(self, ctx):
            self.last = ctx.get_state(ValueStateDescriptor("last", ttl=StateTtlConfig(1)))

        def process(self, row, ctx):
            self.last.update(row["ts"])
            ctx.timer_service().register_event_time_timer(row["ts"])
            yield "row", row["key"], row["ts"]

        def on_timer(self, timestamp, ctx):
            yield "timer", ctx.current_key, timestamp

    return TimedEcho()


def _settings(tmp_path, **more):
    return {"backend": "heap", "checkpoint.storage": "filesystem", "parallelism": 2, "ttl.sweep-seconds": 3600,
            "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), **more}


def test_a_bounded_jobs_listener_checkpoint_and_log_line_carry_its_epochs_metrics(spark, statekit_settings,
                                                                                  tmp_path, caplog):
    statekit_settings(_settings(tmp_path))
    epochs = [[("a", 100), ("a", 200), ("b", 200), ("c", 300)],  # 4 rows, 3 keys, 4 timers; nothing fires
              [("a", 50), ("d", 400)]]  # a@50 is late (watermark 300); the 4 timers fire; a, b, c expired
    got: list[EpochMetrics] = []
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    for number, rows in enumerate(epochs):
        df = spark.createDataFrame(rows, INPUT)
        out = process_keyed(df, "key", timed_echo(), OUTPUT, job_id="metrics-bounded", event_time="ts",
                            watermark_delay="0 ms", processing_time_ms=T0 + number * 10_000,
                            listener=got.append).collect()
        recorded = latest_checkpoint(spark, "metrics-bounded")[0].metadata.properties[METRICS_PROPERTY]
        assert recorded == got[-1].to_property(), "the checkpoint records what the listener got"
        assert got[-1].total["rows_out"] == len(out)
    assert [m.checkpoint_id for m in got] == [1, 2]
    first, second = got[0].total, got[1].total
    assert (first["rows_in"], first["rows_out"], first["keys_touched"], first["keys_exact"]) == (4, 4, 3, True)
    assert (first["timers_registered"], first["timers_fired"], first["late_rows_dropped"]) == (4, 0, 0)
    assert first["restore_sources"] == {"fresh": 2} and first["parallelism"] == 2
    assert (second["rows_in"], second["rows_out"], second["keys_touched"]) == (1, 5, 1)
    assert (second["timers_registered"], second["timers_fired"], second["late_rows_dropped"]) == (1, 4, 1)
    assert second["ttl_removed"] == 3, "the sweep removes a, b and c, written 10 s before with a 1 s TTL"
    assert sum(second["restore_sources"].values()) == 2 and "fresh" not in second["restore_sources"]
    assert second["state_bytes"] > 0 and second["bytes_written_full"] > 0
    assert first["timers_pending"] == 4 and second["timers_pending"] == 1, "d's timer at 400 is left"
    assert (first["state_entries"], second["state_entries"]) == (3, 1), "the heap counts its TTL state's cells"
    assert first["state_entries_exact"] and first["live_state_bytes"] > second["live_state_bytes"] > 0
    assert second["states"]["last"] == {"entries": 1, "bytes": second["live_state_bytes"], "entries_exact": True,
                                        "bytes_basis": "sampled"}
    assert second["states"][timer_state_name(USER_TIMERS, TimeDomain.EVENT_TIME)]["entries"] == 1
    for metrics in got:
        subtasks = metrics.subtasks
        assert [s.subtask for s in subtasks] == [0, 1]
        for name in ("rows_in", "rows_out", "timers_fired", "ttl_removed", "late_rows", "state_bytes",
                     "timers_pending"):
            assert sum(getattr(s, name) for s in subtasks) == metrics.total[name], name
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == LOGGER_NAME and r.levelno == logging.INFO]
    assert [line["checkpoint_id"] for line in lines] == [1, 2], "one line per epoch"
    assert lines[1]["late_rows_dropped"] == 1 and lines[1]["job_id"] == "metrics-bounded"
    assert lines[1]["timers_pending"] == 1 and lines[1]["states"]["last"]["entries"] == 1


def ttl_reader() -> KeyedProcessFunction:
    """Reads a value, a list and a map with a one-second TTL before writing them: each row outputs
    how many of its key's entries the reads found alive."""

    class TtlReader(KeyedProcessFunction):
        def open(self, ctx):
            self.last = ctx.get_state(ValueStateDescriptor("last", ttl=StateTtlConfig(1)))
            self.seen = ctx.get_state(MapStateDescriptor("seen", ttl=StateTtlConfig(1)))
            self.all = ctx.get_state(ListStateDescriptor("all", ttl=StateTtlConfig(1)))

        def process(self, row, ctx):
            alive = (self.last.value() is not None) + len(dict(self.seen.items())) + len(self.all.get())
            self.last.update(row["ts"])
            self.seen.put(row["ts"], True)
            self.all.add(row["ts"])
            yield "alive", row["key"], alive

    return TtlReader()


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_ttl_removed_counts_the_entries_reads_find_expired(spark, statekit_settings, tmp_path, backend):
    statekit_settings(_settings(tmp_path, backend=backend, **{"ttl.sweep-seconds": 0}))  # no sweep: reads only
    epochs = [[("a", 1), ("a", 2), ("b", 3), ("c", 4)],  # a's second row finds its value, map entry, element
              [("a", 5), ("b", 6)]]  # 10 s later: a's value, 2 map entries and 2 elements, b's 1 + 1 + 1 expired
    got: list[EpochMetrics] = []
    outputs = []
    for number, rows in enumerate(epochs):
        outputs.append(sorted(process_keyed(
            spark.createDataFrame(rows, INPUT), "key", ttl_reader(), OUTPUT, job_id=f"ttl-read-{backend}",
            processing_time_ms=T0 + number * 10_000, listener=got.append).collect()))
    assert [tuple(r) for r in outputs[0]] == [("alive", "a", 0), ("alive", "a", 3), ("alive", "b", 0),
                                            ("alive", "c", 0)]
    assert [tuple(r) for r in outputs[1]] == [("alive", "a", 0), ("alive", "b", 0)], "every entry read expired"
    assert [m.total["ttl_removed"] for m in got] == [0, 8], "a: 1 + 2 + 2 entries, b: 1 + 1 + 1; c is not read"
    assert sum(s.ttl_removed for s in got[1].subtasks) == 8
    last = got[1].total["states"]["last"]
    assert last["entries"] == 3 or not last["entries_exact"], "c's expired value stays until read or swept"


def test_metrics_can_be_turned_off(spark, statekit_settings, tmp_path):
    statekit_settings(_settings(tmp_path, **{"metrics.enabled": "false"}))
    got: list[EpochMetrics] = []
    process_keyed(spark.createDataFrame([("a", 1)], INPUT), "key", timed_echo(), OUTPUT, job_id="metrics-off",
                  listener=got.append).collect()
    assert got == []
    assert METRICS_PROPERTY not in latest_checkpoint(spark, "metrics-off")[0].metadata.properties


def test_a_streaming_querys_progress_carries_each_micro_batchs_metrics(spark, statekit_settings, tmp_path):
    from pyspark.sql.streaming import StreamingQuery

    statekit_settings(_settings(tmp_path))
    source = tmp_path / "in"
    source.mkdir()
    (source / "1.json").write_text('{"key": "a", "ts": 100}\n{"key": "b", "ts": 50}\n')
    (source / "2.json").write_text('{"key": "c", "ts": 100}\n{"key": "d", "ts": 101}\n{"key": "e", "ts": 7}\n')
    stream = spark.readStream.schema(INPUT).option("maxFilesPerTrigger", 1).json(str(source))
    seen: list[tuple] = []
    heard: list[EpochMetrics] = []
    query = process_keyed_stream(stream, "key", timed_echo(), OUTPUT,
                                 sink=lambda df, batch_id: seen.extend(df.collect()),
                                 checkpoint_location=str(tmp_path / "query"), job_id="metrics-stream",
                                 event_time="ts", watermark_delay="0 ms", trigger={"availableNow": True},
                                 listener=heard.append)
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    assert isinstance(query, StreamingQuery)
    last = query.lastProgress.observedMetrics[METRICS_KEY]
    assert (last.checkpoint_id, last.rows_in, last.late_rows_dropped, last.keys_touched) == (2, 1, 2, 1), \
        "micro-batch 1: c@100 and e@7 are late (watermark 100), d is processed"
    assert last.timers_fired == 2 and last.rows_out == 3, "the timers at 50 and 100 fire, then d's row"
    assert last.timers_pending == 1, "d's timer at 101 (watermark 100)"
    executed = [p for p in query.recentProgress if "addBatch" in p.durationMs]
    assert [p.observedMetrics[METRICS_KEY].checkpoint_id for p in executed] == [1, 2]
    assert [p.observedMetrics[METRICS_KEY].rows_in for p in executed] == [2, 1]
    assert [m.checkpoint_id for m in heard] == [1, 2]
    assert sum(m.total["rows_out"] for m in heard) == len(seen)
    query._statekit_metrics._batches.clear()  # as on Spark Connect: the micro-batches filled another process's buffer
    recorded = query.statekit_metrics(0)
    assert recorded is not None and recorded.total["rows_in"] == 2, "read back from checkpoint 1"
    assert query.lastProgress.observedMetrics[METRICS_KEY].asDict() == last.asDict()
