"""The key format (``statekit.spi.key_format``) across jobs: state of the old format (keys as
given: an aware datetime with its time zone) written by incremental checkpoints goes on in that
format, through rescales and alongside state of the new format; readers find a timestamp key in
either format by its instant; Spark's TIMESTAMP_NTZ keys stay naive."""
from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any, Iterator
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

import statekit.spi.backend
from statekit import KeyedProcessFunction, ValueStateDescriptor
from statekit.conformance_tests.base import open_keyed_backend
from statekit.conformance_tests.key_formats import OLD_KEYS, add_one, count_of, key_format_of, keys_as_given
from statekit.conformance_tests.workload import WorkloadFunction
from statekit.query import QueryableState
from statekit.registry import backend_class, storage_class
from statekit.runtime.grouped_rows import GroupedRows
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.runtime.local_runner import LocalRunner
from statekit.serializers import PickleSerializer
from statekit.spi import SnapshotOptions, key_group_for_key
from statekit.spi.key_format import KEY_FORMAT, KEYS_AS_GIVEN, KeyBytes, read_key_serializer
from statekit.spi.serializer import SerializerSnapshot
from statekit.spi.errors import CorruptStateError, RestoreError
from statekit.storage.inline import InlineStreams

BACKENDS = ["heap", "rocksdb", "lmdb"]
NEW_YORK = ZoneInfo("America/New_York")
INSTANTS = [dt.datetime(2021, 3, 14, hour, 30, tzinfo=dt.timezone.utc) for hour in range(12)]


def _backend(name: str, tmp_path: Any) -> Any:
    return backend_class(name)(**({} if name == "heap" else {"local-dir": str(tmp_path / "working")}))


@contextlib.contextmanager
def written_before_key_formats(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keyed backends created meanwhile write keys as statekit did before it recorded the key format."""
    with monkeypatch.context() as patch:
        patch.setattr(statekit.spi.backend, "KeyBytes", lambda serializer: KeyBytes(serializer, KEYS_AS_GIVEN))
        yield


def _runner(backend: str, tmp_path: Any, parallelism: int, incremental: bool) -> LocalRunner:
    return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=parallelism, max_parallelism=16,
                       state_backend=_backend(backend, tmp_path), incremental=incremental, job_id="job",
                       storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"), local_dir=str(tmp_path))


def _rows(zone: Any) -> list[tuple[Any, str, int]]:
    return [(instant.astimezone(zone), "a", 1) for instant in INSTANTS]


def _key_formats(tmp_path: Any) -> set[int]:
    """The key formats of the keyed state of the job's latest checkpoint."""
    operator = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job", None).operator()
    return {key_format_of(handle) for subtask in operator.subtasks for handle in subtask.keyed}


@pytest.mark.parametrize("backend", ["rocksdb", "lmdb"])
def test_incremental_state_of_the_old_key_format_goes_on_in_it(backend, tmp_path):
    """Old-format state in an incremental chain (RocksDB's own files, LMDB's changelog), restored
    and extended by incremental checkpoints: still found under its keys, still in its format."""
    streams, options = InlineStreams(), SnapshotOptions(incremental=True)
    state_backend = _backend(backend, tmp_path)
    old = keys_as_given(open_keyed_backend(state_backend, str(tmp_path / "old")))
    try:
        add_one(old, OLD_KEYS[0])
        first = old.snapshot(1, options).write(streams)
        old.notify_checkpoint_complete(1)
    finally:
        old.dispose()
    handle = first
    for checkpoint_id in (2, 3):
        restored = open_keyed_backend(state_backend, str(tmp_path / f"c{checkpoint_id}"), restore_handles=[handle],
                                      restore_streams=streams)
        try:
            add_one(restored, OLD_KEYS[checkpoint_id - 2])
            handle = restored.snapshot(checkpoint_id, options).write(streams)
            restored.notify_checkpoint_complete(checkpoint_id)
        finally:
            restored.dispose()
        assert key_format_of(handle) == KEYS_AS_GIVEN
    chains = ("IncrementalRocksDBStateHandle", "ChangelogStateHandle")
    assert type(handle) is type(first) and type(first).__name__ in chains, "the chain was extended, not rewritten"
    last = open_keyed_backend(state_backend, str(tmp_path / "last"), restore_handles=[handle], restore_streams=streams)
    try:
        assert [count_of(last, key) for key in OLD_KEYS] == [2, 1]
    finally:
        last.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_a_job_of_the_old_key_format_rescales_and_goes_on(backend, incremental, tmp_path, monkeypatch):
    """A job that ran in New York time before the key format was recorded goes on in it after a
    rescale: every key continues its count; a lookup finds each key by its instant, in any zone."""
    with written_before_key_formats(monkeypatch):
        _runner(backend, tmp_path, 2, incremental).run_epoch(_rows(NEW_YORK))
    runner = _runner(backend, tmp_path, 3, incremental)
    counts = runner.run_epoch(_rows(NEW_YORK))
    assert sorted(count for _, count in counts) == [2] * len(INSTANTS), counts
    assert _key_formats(tmp_path) == {KEYS_AS_GIVEN}, "a job of the old key format goes on in it"
    query = QueryableState(f"file://{tmp_path}/checkpoints/job")
    assert [query.get("count", instant) for instant in INSTANTS] == [2] * len(INSTANTS), "looked up in UTC"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_lookup_finds_a_timestamp_key_by_its_instant(backend, tmp_path):
    runner = _runner(backend, tmp_path, 2, incremental=False)
    runner.run_epoch(_rows(NEW_YORK))
    runner.run_epoch(_rows(dt.timezone(dt.timedelta(hours=9))))
    assert _key_formats(tmp_path) == {KEY_FORMAT}
    query = QueryableState(f"file://{tmp_path}/checkpoints/job")
    assert [query.get("count", instant.astimezone(NEW_YORK)) for instant in INSTANTS] == [2] * len(INSTANTS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_of_both_key_formats_restores_into_one_backend_in_the_old(backend, tmp_path):
    """A rescale may merge a subtask of the old key format with one that started afresh in the new:
    the backend goes on in the old format, under which the new bytes are those of keys given in UTC."""
    streams, state_backend = InlineStreams(), _backend(backend, tmp_path)
    handles, keys = [], {}
    for index in range(2):
        writer = open_keyed_backend(state_backend, str(tmp_path / f"w{index}"), subtask_index=index, parallelism=2)
        if index == 0:
            keys_as_given(writer)
        try:
            mine = [i for i in INSTANTS if key_group_for_key(i, writer.max_parallelism) in writer.key_group_range]
            keys[index] = mine[0]
            add_one(writer, mine[0].astimezone(NEW_YORK))
            handles.append(writer.snapshot(1, SnapshotOptions()).write(streams))
        finally:
            writer.dispose()
    assert [key_format_of(h) for h in handles] == [KEYS_AS_GIVEN, KEY_FORMAT]
    merged = open_keyed_backend(state_backend, str(tmp_path / "merged"), restore_handles=handles,
                                restore_streams=streams)
    try:
        assert merged.key_bytes.key_format == KEYS_AS_GIVEN
        assert count_of(merged, keys[0].astimezone(NEW_YORK)) == 1, "old format: found under the key as given"
        assert count_of(merged, keys[1]) == 1, "new format: found under the key in UTC"
    finally:
        merged.dispose()


def test_the_key_format_is_read_from_the_key_serializer_config() -> None:
    pickle = {"identity": "statekit.serializers.pickle:PickleSerializer", "version": 1, "config": {"protocol": 5}}
    assert read_key_serializer(pickle) == (SerializerSnapshot.from_json(pickle), KEYS_AS_GIVEN)
    with_format = {**pickle, "config": {"protocol": 5, "key_format": 2}}
    assert read_key_serializer(with_format) == (SerializerSnapshot.from_json(pickle), 2)
    with pytest.raises(RestoreError, match="key format 3, written by a newer statekit"):
        read_key_serializer({**pickle, "config": {"key_format": 3}})
    with pytest.raises(CorruptStateError, match="key_format must be a positive integer, got '2'"):
        read_key_serializer({**pickle, "config": {"key_format": "2"}})


def test_spark_timestamp_keys_reach_state_aware_and_ntz_keys_naive() -> None:
    """Spark sends a TIMESTAMP column as an Arrow timestamp in the session time zone and a
    TIMESTAMP_NTZ column without one: keys are aware and naive datetimes; only aware ones are
    instants, which the key format stores in UTC, while a naive one is stored as it is."""
    micros = [1_615_710_600_000_000]
    rows = pa.record_batch({"ts": pa.array(micros, pa.timestamp("us", tz="America/New_York")),
                            "ntz": pa.array(micros, pa.timestamp("us"))})
    (aware,) = GroupedRows.of_sorted(rows, ["ts"], pa.array([0], pa.int32())).keys
    (naive,) = GroupedRows.of_sorted(rows, ["ntz"], pa.array([0], pa.int32())).keys
    assert aware.utcoffset() == dt.timedelta(hours=-4) and naive.tzinfo is None
    keys = KeyBytes(PickleSerializer())
    assert keys.canonical(aware) == aware and keys.canonical(aware).utcoffset() == dt.timedelta(0)
    assert keys.serialize(naive) == keys.serializer.serialize(naive)
    assert keys.serialize(("x", aware)) == keys.serializer.serialize(("x", aware.astimezone(dt.timezone.utc)))


@pytest.mark.spark
@pytest.mark.parametrize("backend", ["rocksdb", "lmdb"])
@pytest.mark.parametrize("column_type", ["timestamp", "timestamp_ntz"])
def test_spark_timestamp_keys_are_one_key_whatever_the_session_time_zone(spark, statekit_settings, backend,
                                                                         column_type):
    """Two runs of a job in other session time zones: a TIMESTAMP key is its instant and a
    TIMESTAMP_NTZ key its wall-clock time, each one key in both runs (Spark groups and hashes
    them so), whose count goes on."""
    from statekit.spark import process_keyed

    class CountPerKey(KeyedProcessFunction):  # defined here: pickled by value
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

        def process(self, row, ctx):
            self.count.update(self.count.value() + 1)
            yield str(row["ts"]), self.count.value()

    statekit_settings(backend=backend, parallelism=2)
    zone = spark.conf.get("spark.sql.session.timeZone")
    counts = []
    try:
        for run, session_zone in enumerate(("UTC", "America/New_York")):
            spark.conf.set("spark.sql.session.timeZone", session_zone)
            keys = INSTANTS if column_type == "timestamp" else [instant.replace(tzinfo=None) for instant in INSTANTS]
            df = spark.createDataFrame([(key,) for key in keys], f"ts {column_type}")
            out = process_keyed(df, "ts", CountPerKey(), "ts string, count long",
                                job_id=f"zones-{column_type}-{backend}")
            counts.append(sorted(row["count"] for row in out.collect()))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert counts == [[1] * len(INSTANTS), [2] * len(INSTANTS)], counts
