"""Event-time TTL on the local runner, on every backend: a de-duplication by event id whose "seen"
entries are written at the row's event time and expire when the watermark passes event time +
ttl, checked against a plain-Python recomputation, while the processing time leaps ahead (no wall
clock is involved); the checkpoint reader's view of the entries; batch and vector functions'
write times; and the end of the input, which expires every entry."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from statekit import (
    KeyedBatchFunction, KeyedProcessFunction, KeyedVectorFunction, StateTtlConfig, TtlTimeCharacteristic,
    ValueStateDescriptor,
)
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.registry import backend_class, storage_class
from statekit.runtime.event_time import MAX_EVENT_TIME, WATERMARK
from statekit.runtime.local_runner import LocalRunner
from statekit.spi import ConfigurationError, IncompatibleSerializerError
from statekit.spi.timers import MIN_TIMESTAMP

TTL_MS = 10_000
DELAY_MS = 1_000
SEEN = ValueStateDescriptor("seen", ttl=StateTtlConfig(TTL_MS / 1000,
                                                       time_characteristic=TtlTimeCharacteristic.EVENT_TIME))
#: (id, event time) per epoch: duplicates within the TTL, after it, late rows, and rows out of order
EPOCHS = [
    [("a", 1_000), ("b", 2_000), ("a", 3_000), ("c", 9_000)],
    [("a", 10_500), ("b", 12_500), ("d", 15_000), ("c", 14_000)],  # watermark 8 000: a, b alive
    [("a", 20_000), ("b", 21_000), ("c", 19_500), ("x", 5_000)],   # watermark 14 000: a, b expired; c alive; x late
    [("a", 31_000), ("d", 24_000), ("c", 30_000), ("e", 25_000)],  # watermark 20 000: c expired; a, d alive
    [("a", 45_000), ("d", 44_000), ("b", 40_000)],                 # watermark 30 000
]


class FirstSighting(KeyedProcessFunction):
    def open(self, ctx):
        self.seen = ctx.get_state(SEEN)

    def process(self, row, ctx):
        if self.seen.value() is None:
            self.seen.update(True)
            yield (row["id"], row["ts"])


def oracle(epochs: list[list[tuple[str, int]]]) -> tuple[list[list[tuple[str, int]]], dict[str, int], int]:
    """Each epoch's output, the write times of the entries alive after the last epoch, and its watermark."""
    written: dict[str, int] = {}
    watermark, seen_max = MIN_TIMESTAMP, MIN_TIMESTAMP
    outputs = []
    for rows in epochs:
        if seen_max > MIN_TIMESTAMP:
            watermark = max(watermark, seen_max - DELAY_MS)
        emitted = []
        for event_id, ts in rows:
            seen_max = max(seen_max, ts)
            if ts <= watermark:
                continue  # late: dropped
            if event_id not in written or written[event_id] + TTL_MS <= watermark:
                emitted.append((event_id, ts))
                written[event_id] = max(ts, watermark)
        outputs.append(emitted)
    alive = {event_id: t for event_id, t in written.items() if t + TTL_MS > watermark}
    return outputs, alive, watermark


def _runner(backend: str, tmp_path: Any, function: Any, *, incremental: bool = False, **options: Any) -> LocalRunner:
    working = {} if backend == "heap" else {"local-dir": str(tmp_path / "working")}
    clock = iter(range(0, 10**12, 10**9))  # processing time leaps 11 days an epoch: it must expire nothing
    return LocalRunner(function, lambda row: row["id"], parallelism=2, state_backend=backend_class(backend)(**working),
                       storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"), job_id="job",
                       incremental=incremental, clock=lambda: next(clock), event_time="ts",
                       watermark_delay=f"{DELAY_MS} ms", **options)


def _rows(epoch: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"id": event_id, "ts": ts} for event_id, ts in epoch]


def _cells(tmp_path: Any) -> tuple[dict[str, int], dict[str, Any]]:
    """The latest checkpoint's 'seen' entries (id -> write time) and its properties."""
    reader = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job")
    operator = reader.operator()
    cells = [c for i in range(operator.parallelism) for c in reader.cells(operator, i, operator.parallelism)]
    return {c.key: c.ttl_timestamp for c in cells if c.state == "seen"}, reader.metadata.properties


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_a_deduplication_expires_by_the_watermark_from_each_rows_event_time(backend, incremental, tmp_path):
    expected, alive, watermark = oracle(EPOCHS)
    runner = _runner(backend, tmp_path, FirstSighting(), incremental=incremental)
    for number, (rows, wanted) in enumerate(zip(EPOCHS, expected), start=1):
        emitted = runner.run_epoch(_rows(rows))
        assert sorted(emitted) == sorted(wanted), f"epoch {number}"
    written, properties = _cells(tmp_path)
    assert properties[WATERMARK] == watermark
    assert written == alive, "the reader shows the entries alive at the checkpoint's watermark, at their event times"


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_the_end_of_the_input_expires_every_entry(backend, incremental, tmp_path):
    runner = _runner(backend, tmp_path, FirstSighting(), incremental=incremental)
    runner.run_epoch(_rows(EPOCHS[0]))
    assert runner.run_epoch(_rows(EPOCHS[1]), end_of_input=True)
    written, _ = _cells(tmp_path)
    assert written == {}, "after the end of the input (watermark at the largest timestamp) no entry is alive"
    if not incremental:
        metadata = runner.latest_metadata()
        assert all(not s.keyed for s in metadata.operators["keyed-process"].subtasks), \
            "a full checkpoint at the end of the input holds no event-time TTL entry"


class LatestPerKey(KeyedBatchFunction):
    def open(self, ctx):
        self.seen = ctx.get_state(SEEN)

    def process_rows(self, key, rows, ctx):
        self.seen.update(rows.num_rows)


class LatestPerBatch(KeyedVectorFunction):
    def open(self, ctx):
        self.seen = ctx.get_bulk_state(SEEN)

    def process_groups(self, groups, ctx):
        self.seen.update_many(groups, groups.counts().tolist())


@pytest.mark.parametrize("function, write_times", [
    (LatestPerKey(), {"a": 3_000, "b": 2_000, "c": 9_000}),  # the largest event time of each key's rows
    (LatestPerBatch(), {"a": 9_000, "b": 9_000, "c": 9_000}),  # the largest of the subtask's batch
], ids=["batch", "vector"])
def test_batch_and_vector_functions_write_at_the_largest_event_time_of_their_rows(function, write_times, tmp_path):
    runner = LocalRunner(function, lambda row: row["id"], parallelism=1, event_time="ts", watermark_delay="1 s",
                         storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"), job_id="job",
                         clock=lambda: 0)
    runner.run_epoch(_rows(EPOCHS[0]))
    written, properties = _cells(tmp_path)
    assert properties[MAX_EVENT_TIME] == 9_000
    assert written == write_times


def test_a_job_without_event_time_writes_at_the_watermark_and_drains_at_the_end(tmp_path):
    """No event time: nothing stamps writes but the watermark, which never moves, so entries
    expire only when the input ends."""
    runner = LocalRunner(FirstSighting(), lambda row: row["id"], parallelism=1, clock=lambda: 0,
                         storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"), job_id="job")
    assert len(runner.run_epoch(_rows(EPOCHS[0]))) == 3
    assert runner.run_epoch(_rows(EPOCHS[1])) == [("d", 15_000)]
    assert runner.run_epoch([], end_of_input=True) == []
    assert _cells(tmp_path)[0] == {}


class SeenByProcessingTime(FirstSighting):
    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", ttl=StateTtlConfig(TTL_MS / 1000)))


def test_a_restore_with_the_other_time_is_refused(tmp_path):
    runner = _runner("heap", tmp_path, FirstSighting())
    runner.run_epoch(_rows(EPOCHS[0]))
    runner.function = SeenByProcessingTime()
    with pytest.raises(IncompatibleSerializerError, match="event-time TTL and is registered with processing-time"):
        runner.run_epoch(_rows(EPOCHS[1]))


def test_a_bad_time_characteristic_names_the_enum():
    with pytest.raises(ConfigurationError, match="TtlTimeCharacteristic.EVENT_TIME"):
        StateTtlConfig(10, time_characteristic="event-time")


def test_event_time_ttl_reads_the_arrow_event_time_of_timestamp_columns():
    from statekit.runtime.event_time import ElementTimes
    import datetime

    times = ElementTimes.of_column("ts")
    moment = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    batch = pa.RecordBatch.from_pydict({"ts": pa.array([moment, None], pa.timestamp("us", "UTC"))})
    assert times.of_rows(batch) == times.of_row({"ts": moment}) == int(moment.timestamp() * 1000)
    assert times.of_row({"ts": None}) is None


class LastValueAtItsTimer(KeyedProcessFunction):
    """Keeps each key's last value (event-time TTL) and reads it in an event-time timer a second later."""

    def open(self, ctx: Any) -> None:
        self.seen = ctx.get_state(SEEN)

    def process(self, row: Any, ctx: Any) -> None:
        self.seen.update(row["v"])
        ctx.timer_service().register_event_time_timer(row["ts"] + 1_000)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.current_key, timestamp, self.seen.value()


def test_timers_at_the_end_of_the_input_read_event_time_ttl_state_as_of_their_own_time():
    """At the end of the input the watermark is the largest timestamp, at which every entry has
    expired; a timer firing then still reads the state as of its own time, and the final
    checkpoint holds none of it."""
    runner = LocalRunner(LastValueAtItsTimer(), lambda row: row["k"], parallelism=1, event_time="ts",
                         watermark_delay="0 ms")
    assert sorted(runner.run_epoch([{"k": "a", "ts": 1_000, "v": 1}, {"k": "b", "ts": 50_000, "v": 2}],
                                   end_of_input=True)) == [("a", 2_000, 1), ("b", 51_000, 2)]
