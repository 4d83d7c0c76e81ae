"""State TTL under Spark: a de-duplication job (one ValueState per event id, TTL one hour of epoch
time) over 20 epochs six minutes apart, on every backend. No duplicate within the hour is emitted,
an id seen again after its hour is emitted again, and the state stays bounded: the latest
checkpoint holds exactly the ids of the last hour, and its bytes stay within 10% of those of
the checkpoint at epoch 10, the first that held a full hour.

And the same de-duplication on event-time TTL: entries written at each row's event time and
expired by the watermark, over epochs whose processing time never moves (no wall clock, no
sleep), against a plain-Python recomputation."""
from __future__ import annotations

import random

import pytest

from statekit import KeyedProcessFunction, StateTtlConfig, TtlTimeCharacteristic, ValueStateDescriptor
from statekit.backends.common import read_key_groups
from statekit.spark import latest_checkpoint, process_keyed
from statekit.spi import KeyGroupsStateHandle
from test_event_time_ttl import DELAY_MS, TTL_MS, oracle
from test_event_time_ttl import EPOCHS as EVENT_EPOCHS

pytestmark = pytest.mark.spark

HOUR_MS = 3_600_000
STEP_MS = 6 * 60_000
T0 = 1_700_000_000_000
EPOCHS = 20
NEW_PER_EPOCH = 150
SCHEMA = "event_id string, payload long"
OUTPUT = "event_id string, epoch long"


def first_sighting() -> KeyedProcessFunction:
    """Emits an event the first time its id is seen within an hour (defined in a function, so
    Spark's workers get the class by value)."""

    class FirstSighting(KeyedProcessFunction):
        def open(self, ctx):
            self.seen = ctx.get_state(ValueStateDescriptor("seen", ttl=StateTtlConfig(HOUR_MS / 1000)))
            self.epoch = ctx.checkpoint_id

        def process(self, row, ctx):
            if self.seen.value() is None:
                self.seen.update(True)
                yield (row["event_id"], self.epoch)

    return FirstSighting()


def _id(epoch: int, i: int) -> str:
    return f"e{epoch:03d}-{i:04d}"  # one width: bytes per id do not grow with the epoch


def _epoch_events(epoch: int, rng: random.Random) -> tuple[list[tuple[str, int]], set[str], set[str]]:
    """Epoch ``epoch``'s events, the ids that must be emitted, and those that must not."""
    new = [_id(epoch, i) for i in range(NEW_PER_EPOCH)]
    recent = [_id(e, rng.randrange(NEW_PER_EPOCH)) for e in range(max(1, epoch - 9), epoch)]  # within the hour
    stale = [_id(epoch - 12, i) for i in range(5)] if epoch > 12 else []  # 72 minutes old: expired
    events = [(event_id, 1) for event_id in new + new[:10] + recent + stale]  # and duplicates within the epoch
    rng.shuffle(events)
    return events, set(new) | set(stale), set(recent)


def _checkpoint_rows(spark, job_id: str) -> tuple[int, int]:
    """(rows of state 'seen', bytes of state) in the job's latest checkpoint."""
    latest, streams = latest_checkpoint(spark, job_id)
    rows = size = 0
    for subtask in latest.metadata.operators["keyed-process"].subtasks:
        for handle in subtask.keyed:
            size += handle.state_size
            assert isinstance(handle, KeyGroupsStateHandle), f"a full checkpoint is canonical, got {handle}"
            for _, batch in read_key_groups(handle, streams, handle.key_group_range):
                rows += batch.to_pydict()["state"].count("seen")
    return rows, size


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb", "sqlite"])
def test_deduplication_with_a_one_hour_ttl_stays_bounded(spark, statekit_settings, tmp_path, backend):
    statekit_settings({"backend": backend, "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 2})
    job_id = f"dedup-{backend}"
    rng = random.Random(7)
    written_at: dict[str, int] = {}
    sizes = {}
    for epoch in range(1, EPOCHS + 1):
        now = T0 + epoch * STEP_MS
        events, expected, suppressed = _epoch_events(epoch, rng)
        df = spark.createDataFrame(events, SCHEMA)
        emitted = [row["event_id"] for row in
                   process_keyed(df, "event_id", first_sighting(), OUTPUT, job_id=job_id, processing_time_ms=now).collect()]
        assert len(emitted) == len(set(emitted)), f"epoch {epoch}: an id was emitted twice"
        assert set(emitted) == expected, (
            f"epoch {epoch}: emitted {len(emitted)} ids; missing {sorted(expected - set(emitted))[:5]}, "
            f"duplicates within the hour {sorted(set(emitted) & suppressed)[:5]}")
        written_at.update({event_id: now for event_id in emitted})
        live, size = _checkpoint_rows(spark, job_id)
        sizes[epoch] = size
        within_hour = sum(1 for t in written_at.values() if t + HOUR_MS > now)
        assert live == within_hour, f"epoch {epoch}: the checkpoint holds {live} ids, the last hour has {within_hour}"
    assert abs(sizes[EPOCHS] / sizes[10] - 1) <= 0.10, (
        f"checkpoint bytes grew from {sizes[10]} (epoch 10, one hour of ids) to {sizes[EPOCHS]} (epoch {EPOCHS})")


def first_sighting_in_event_time() -> KeyedProcessFunction:
    """Emits an id the first time it is seen within TTL_MS of event time."""

    class FirstSightingInEventTime(KeyedProcessFunction):
        def open(self, ctx):
            self.seen = ctx.get_state(ValueStateDescriptor("seen", ttl=StateTtlConfig(
                TTL_MS / 1000, time_characteristic=TtlTimeCharacteristic.EVENT_TIME)))

        def process(self, row, ctx):
            if self.seen.value() is None:
                self.seen.update(True)
                yield (row["id"], row["ts"])

    return FirstSightingInEventTime()


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_deduplication_within_the_watermark_needs_no_wall_clock(spark, statekit_settings, tmp_path, backend):
    """Epochs at one fixed processing time: a duplicate whose first sighting's event time + ttl the
    watermark passed is emitted again, one within it is suppressed, late rows are dropped."""
    statekit_settings({"backend": backend, "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "parallelism": 2})
    expected, alive, _ = oracle(EVENT_EPOCHS)
    for number, (rows, wanted) in enumerate(zip(EVENT_EPOCHS, expected), start=1):
        df = spark.createDataFrame(rows, "id string, ts long")
        emitted = process_keyed(df, "id", first_sighting_in_event_time(), "id string, ts long",
                                job_id=f"event-dedup-{backend}", processing_time_ms=T0, event_time="ts",
                                watermark_delay=f"{DELAY_MS} ms").collect()
        assert sorted((r["id"], r["ts"]) for r in emitted) == sorted(wanted), f"epoch {number}"
    latest, streams = latest_checkpoint(spark, f"event-dedup-{backend}")
    held = set()
    for subtask in latest.metadata.operators["keyed-process"].subtasks:
        for handle in subtask.keyed:
            for _, batch in read_key_groups(handle, streams, handle.key_group_range):
                held.update(k for k, s in zip(batch.column("key").to_pylist(), batch.column("state").to_pylist())
                            if s == "seen")
    assert len(held) == len(alive), "the full checkpoint holds exactly the entries the watermark keeps"
