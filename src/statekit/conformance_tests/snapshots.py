"""Snapshot/restore level: round trips, async-snapshot isolation, serializer compatibility,
corruption detection, and the rescale matrix compared with an oracle on every key and value.

Override ``state_backend`` (and optionally ``snapshot_streams`` to write through a storage).
"""
from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.base import BackendTestBase, open_keyed_backend, requires, set_key
from statekit.conformance_tests.compare import assert_same_rows, assert_same_state
from statekit.conformance_tests.workload import (
    COUNT, LAST, MAXIMUM, MEAN, SUMS, Row, WorkloadFunction, dump_state, expected_outputs, expected_state, make_rows,
    read_key_state,
)
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.snapshot_upload import SnapshotUpload
from statekit.runtime.task import KeyedTask
from statekit.serializers import Int64Serializer, StringSerializer
from statekit.spi import (
    SnapshotOptions, CorruptStateError, IncompatibleSerializerError, InlineStateHandle, KeyedStateBackend,
    KeyGroupRange, KeyGroupsStateHandle, ListStateDescriptor, MapStateDescriptor, OperatorBackendParams,
    SnapshotType, StateBackend, StateHandle, SubtaskInfo, ValueStateDescriptor, key_group_for_key,
)
from statekit.spi.storage import CheckpointStorage, CheckpointStreams
from statekit.storage.inline import InlineStreams

MAX_P = 128
RESCALE_MATRIX = [(4, 2), (2, 4), (2, 2), (15, 77), (77, 15)]


def _fill(backend: KeyedStateBackend, keys: range, base: int = 0) -> dict[str, Any]:
    """Write every state kind for ``keys``; return the expected contents."""
    count, last, sums = backend.get_state(COUNT), backend.get_state(LAST), backend.get_state(SUMS)
    expected: dict[str, Any] = {}
    for k in keys:
        key = f"key-{k}"
        set_key(backend, key)
        count.update(base + k)
        last.update([k, k + 1, base])
        sums.put_all({"a": k, "b": base})
        expected[key] = (base + k, [k, k + 1, base], {"a": k, "b": base})
    return expected


def _records(rows: list[Row]) -> list[tuple[Any, int, Row]]:
    """Workload rows as a task processes them: (key, key group, row)."""
    return [(row[0], key_group_for_key(row[0], MAX_P), row) for row in rows]


def _read_all(backend: KeyedStateBackend) -> dict[str, Any]:
    count, last, sums = backend.get_state(COUNT), backend.get_state(LAST), backend.get_state(SUMS)
    found: dict[str, Any] = {}
    for key in sorted(backend.keys(COUNT.name)):
        set_key(backend, key)
        found[key] = (count.value(), last.get(), dict(sums.items()))
    return found


SNAPSHOT_MODES = ["full", "incremental"]


def snapshot_options_for(mode: str, state_backend: StateBackend) -> SnapshotOptions:
    """Options of a snapshot mode; incremental needs the capability (else the test skips)."""
    if mode == "incremental":
        requires(state_backend, "incremental_snapshots")
    return SnapshotOptions(incremental=mode == "incremental")


class SnapshotRestoreTests(BackendTestBase):
    @pytest.fixture(params=SNAPSHOT_MODES)
    def snapshot_options(self, request: Any, state_backend: StateBackend) -> SnapshotOptions:
        """Every round trip runs with full and (where declared) incremental snapshots."""
        return snapshot_options_for(request.param, state_backend)

    @pytest.fixture
    def snapshot_streams(self) -> CheckpointStreams:
        """Where snapshots are written and read; inline bytes by default."""
        return InlineStreams()

    def _restore(self, state_backend: StateBackend, tmp_path: Any, handles: list[Any],
                 streams: CheckpointStreams, name: str = "restored", **kwargs: Any) -> KeyedStateBackend:
        return open_keyed_backend(state_backend, str(tmp_path / name), restore_handles=handles,
                                  restore_streams=streams, **kwargs)

    def test_round_trip_every_key_and_value(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        expected = _fill(keyed_backend, range(2000))
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        assert handle is not None, "a backend with state must produce a handle"
        json.dumps(handle.to_json())  # handles are JSON-serializable
        handle = StateHandle.from_json(json.loads(json.dumps(handle.to_json())))
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            assert_same_state(_read_all(restored), expected, "state restored from the snapshot")
        finally:
            restored.dispose()

    def test_empty_backend_snapshot_restores_empty(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        keyed_backend.get_state(COUNT)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle] if handle else [], snapshot_streams)
        try:
            assert list(restored.keys(COUNT.name)) == []
        finally:
            restored.dispose()

    def test_cleared_state_is_not_restored(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        _fill(keyed_backend, range(100))
        for k in range(0, 100, 2):
            set_key(keyed_backend, f"key-{k}")
            for descriptor in (COUNT, LAST, SUMS):
                keyed_backend.get_state(descriptor).clear()
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            assert sorted(restored.keys(COUNT.name)) == sorted(f"key-{k}" for k in range(1, 100, 2))
            assert sorted(restored.keys(SUMS.name)) == sorted(f"key-{k}" for k in range(1, 100, 2))
        finally:
            restored.dispose()

    def test_namespaces_survive_restore(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        state = keyed_backend.get_state(ValueStateDescriptor("windowed"))
        for k in range(50):
            set_key(keyed_backend, k)
            for window in (None, 10, 20):
                state.set_current_namespace(window)
                state.update((k, window))
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            state = restored.get_state(ValueStateDescriptor("windowed"))
            for k in range(50):
                set_key(restored, k)
                for window in (None, 10, 20):
                    state.set_current_namespace(window)
                    assert state.value() == (k, window)
            assert sorted(restored.keys("windowed", 20)) == list(range(50))
        finally:
            restored.dispose()

    def test_state_not_registered_again_is_carried_forward(self, state_backend, keyed_backend,
                                                           snapshot_streams, snapshot_options, tmp_path):
        """Restored state the job does not touch in an epoch must survive the next snapshot."""
        expected = _fill(keyed_backend, range(300))
        first = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        middle = self._restore(state_backend, tmp_path, [first], snapshot_streams, name="middle")
        try:
            second = middle.snapshot(2, snapshot_options).write(snapshot_streams)  # no get_state call at all
        finally:
            middle.dispose()
        restored = self._restore(state_backend, tmp_path, [second], snapshot_streams)
        try:
            assert_same_state(_read_all(restored), expected, "restored state not registered again in the "
                                                             "middle epoch")
        finally:
            restored.dispose()

    # --- async snapshot isolation
    def test_writes_after_sync_part_do_not_leak(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        expected = _fill(keyed_backend, range(1000))
        mean = keyed_backend.get_state(MEAN)
        set_key(keyed_backend, "key-1")
        mean.add(10)
        pending = keyed_backend.snapshot(1, snapshot_options)
        _mutate_everything(keyed_backend)
        handle = pending.write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            assert_same_state(_read_all(restored), expected, "writes made after the synchronous part leaked into "
                                                             "the snapshot")
            set_key(restored, "key-1")
            assert restored.get_state(MEAN).get() == 10, "an in-place accumulator update leaked into the snapshot"
        finally:
            restored.dispose()

    def test_in_place_mutation_after_sync_part_does_not_reach_snapshot(self, state_backend, keyed_backend,
                                                                        snapshot_streams, snapshot_options, tmp_path):
        """Objects read from state and mutated in place (no update()) after the synchronous part:
        the snapshot keeps its point in time."""
        profile = keyed_backend.get_state(ValueStateDescriptor("profile"))
        tags = keyed_backend.get_state(MapStateDescriptor("tags"))
        history = keyed_backend.get_state(ListStateDescriptor("history"))
        set_key(keyed_backend, "k")
        profile.update({"n": 1})
        tags.put("a", [1])
        history.add({"seen": 1})
        pending = keyed_backend.snapshot(1, snapshot_options)
        profile.value()["n"] = 99
        tags.get("a").append(99)
        history.get()[0]["seen"] = 99
        handle = pending.write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            set_key(restored, "k")
            found = (restored.get_state(ValueStateDescriptor("profile")).value(),
                     restored.get_state(MapStateDescriptor("tags")).get("a"),
                     restored.get_state(ListStateDescriptor("history")).get())
            assert found == ({"n": 1}, [1], [{"seen": 1}]), \
                f"an in-place mutation after the synchronous part reached the snapshot: restored {found!r}"
        finally:
            restored.dispose()

    def test_map_user_keys_survive_a_backend_switch(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        """Map entries whose user keys are equal in Python but not in bytes (1, True, 1.0) stay
        distinct through savepoints from this backend into the heap backend and back."""
        from statekit.backends.heap import HeapStateBackend

        descriptor = MapStateDescriptor("m")
        set_key(keyed_backend, "k")
        state = keyed_backend.get_state(descriptor)
        for user_key, value in ((1, "int"), (True, "bool"), (1.0, "float")):
            state.put(user_key, value)
        want = sorted([("1", "int"), ("True", "bool"), ("1.0", "float")])
        savepoint = SnapshotOptions(SnapshotType.SAVEPOINT)
        handle = keyed_backend.snapshot(1, savepoint).write(snapshot_streams)
        heap = self._restore(HeapStateBackend(), tmp_path, [handle], snapshot_streams, name="heap")
        try:
            set_key(heap, "k")
            found = sorted((repr(k), v) for k, v in heap.get_state(descriptor).items())
            assert found == want, f"the heap backend restored this backend's map as {found}, expected {want}"
            back = heap.snapshot(2, savepoint).write(snapshot_streams)
        finally:
            heap.dispose()
        restored = self._restore(state_backend, tmp_path, [back], snapshot_streams)
        try:
            set_key(restored, "k")
            found = sorted((repr(k), v) for k, v in restored.get_state(descriptor).items())
            assert found == want, f"after switching to heap and back, the map is {found}, expected {want}"
        finally:
            restored.dispose()

    def test_overlapping_snapshots_each_see_their_own_point(self, state_backend, keyed_backend,
                                                            snapshot_streams, snapshot_options, tmp_path):
        first_expected = _fill(keyed_backend, range(500))
        first = keyed_backend.snapshot(1, snapshot_options)
        second_expected = _fill(keyed_backend, range(250, 750), base=10_000)
        second = keyed_backend.snapshot(2, snapshot_options)
        _mutate_everything(keyed_backend)
        second_handle = second.write(snapshot_streams)
        first_handle = first.write(snapshot_streams)
        want_second = {**first_expected, **second_expected}
        for name, handle, want in (("one", first_handle, first_expected), ("two", second_handle, want_second)):
            restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams, name=name)
            try:
                assert_same_state(_read_all(restored), want, f"snapshot {name} does not hold its own point in time")
            finally:
                restored.dispose()

    def test_write_runs_concurrently_with_processing(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        requires(state_backend, "async_snapshots")
        expected = _fill(keyed_backend, range(3000))
        pending = keyed_backend.snapshot(1, snapshot_options)
        result: dict[str, Any] = {}

        def write() -> None:
            try:
                result["handle"] = pending.write(snapshot_streams)
            except BaseException as exc:  # surfaced below
                result["error"] = exc

        writer = threading.Thread(target=write)
        writer.start()
        for round_ in range(3):
            _mutate_everything(keyed_backend, salt=round_)
        writer.join(timeout=120)
        assert "error" not in result, f"the asynchronous part failed while processing continued: {result.get('error')!r}"
        restored = self._restore(state_backend, tmp_path, [result["handle"]], snapshot_streams)
        try:
            assert_same_state(_read_all(restored), expected, "a snapshot written while processing continued")
        finally:
            restored.dispose()

    def test_task_upload_isolated_from_processing_that_goes_on(self, state_backend, snapshot_streams, tmp_path):
        """The path a Spark task takes: its snapshot uploads on a thread (``SnapshotUpload``) while
        the task goes on; rows processed meanwhile never reach the uploaded snapshot."""
        requires(state_backend, "async_snapshots")
        subtask = SubtaskInfo("conformance-job", "op", 0, 1, MAX_P)
        first, later = make_rows(3000, 400, seed=1), make_rows(3000, 400, seed=2)
        task = KeyedTask.create(WorkloadFunction(), state_backend, subtask, 1, local_dir=str(tmp_path / "task"))
        try:
            task.open()
            task.process_all(_records(first), [])
            upload = SnapshotUpload(task.snapshot(), snapshot_streams, concurrent=True)
            task.process_all(_records(later), [])
            written = upload.result()
        finally:
            task.close()
        restored = self._restore(state_backend, tmp_path, list(written.keyed), snapshot_streams)
        try:
            found = {}
            for key in restored.keys(COUNT.name):
                set_key(restored, key)
                found[key] = read_key_state(restored, key)
            assert_same_state(found, expected_state(first), "a snapshot uploaded while the task processed more rows")
        finally:
            restored.dispose()

    # --- serializer compatibility
    def test_same_serializer_restores(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        descriptor = ValueStateDescriptor("typed", Int64Serializer())
        set_key(keyed_backend, "k")
        keyed_backend.get_state(descriptor).update(42)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            set_key(restored, "k")
            assert restored.get_state(ValueStateDescriptor("typed", Int64Serializer())).value() == 42
        finally:
            restored.dispose()

    @pytest.mark.parametrize("new_descriptor", [
        ValueStateDescriptor("typed", StringSerializer()),
        ValueStateDescriptor("typed"),  # the default (pickle) cannot read Int64 bytes
    ], ids=["string", "pickle"])
    def test_incompatible_value_serializer_is_a_clear_error(self, state_backend, keyed_backend,
                                                           snapshot_streams, snapshot_options, tmp_path, new_descriptor):
        set_key(keyed_backend, "k")
        keyed_backend.get_state(ValueStateDescriptor("typed", Int64Serializer())).update(42)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            with pytest.raises(IncompatibleSerializerError, match=r"typed.*Int64Serializer"):
                restored.get_state(new_descriptor)
        finally:
            restored.dispose()

    def test_incompatible_map_key_serializer_is_a_clear_error(self, state_backend, keyed_backend,
                                                              snapshot_streams, snapshot_options, tmp_path):
        set_key(keyed_backend, "k")
        keyed_backend.get_state(MapStateDescriptor("m", StringSerializer(), Int64Serializer())).put("x", 1)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            with pytest.raises(IncompatibleSerializerError, match="user key"):
                restored.get_state(MapStateDescriptor("m", Int64Serializer(), Int64Serializer()))
        finally:
            restored.dispose()

    def test_changed_state_kind_is_a_clear_error(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        from statekit.spi import StateAccessError
        set_key(keyed_backend, "k")
        keyed_backend.get_state(ValueStateDescriptor("kind")).update(1)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            with pytest.raises(StateAccessError, match="kind"):
                restored.get_state(ListStateDescriptor("kind"))
        finally:
            restored.dispose()

    # --- corruption
    def test_flipped_byte_is_a_checksum_error(self, state_backend, keyed_backend, tmp_path):
        _fill(keyed_backend, range(500))
        handle = keyed_backend.snapshot(1).write(InlineStreams())
        assert isinstance(handle, KeyGroupsStateHandle), "canonical snapshots use KeyGroupsStateHandle"
        some_range = next(iter(handle.key_groups.values()))
        data = bytearray(handle.stream.data)  # type: ignore[attr-defined]
        data[some_range.offset + some_range.length // 2] ^= 0xFF
        corrupt = KeyGroupsStateHandle(handle.key_group_range, InlineStateHandle(bytes(data)), handle.key_groups,
                                       handle.key_serializer, handle.states, handle.format)
        with pytest.raises(CorruptStateError, match="checksum"):
            backend = self._restore(state_backend, tmp_path, [corrupt], InlineStreams())
            try:  # a lazily restoring backend must fail on first access at the latest
                _read_all(backend)
            finally:
                backend.dispose()

    def test_truncated_stream_is_a_clear_error(self, state_backend, keyed_backend, tmp_path):
        _fill(keyed_backend, range(500))
        handle = keyed_backend.snapshot(1).write(InlineStreams())
        data = handle.stream.data  # type: ignore[attr-defined]
        truncated = KeyGroupsStateHandle(handle.key_group_range, InlineStateHandle(data[: len(data) // 2]),
                                         handle.key_groups, handle.key_serializer, handle.states, handle.format)
        with pytest.raises(CorruptStateError):
            backend = self._restore(state_backend, tmp_path, [truncated], InlineStreams())
            try:
                _read_all(backend)
            finally:
                backend.dispose()

    # --- key groups on restore
    def test_restore_reads_only_own_key_groups(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        _fill(keyed_backend, range(2000))
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        for index in range(3):
            restored = open_keyed_backend(state_backend, str(tmp_path / f"part-{index}"), subtask_index=index,
                                          parallelism=3, restore_handles=[handle], restore_streams=snapshot_streams)
            try:
                own = KeyGroupRange.of_subtask(MAX_P, 3, index)
                from statekit.spi import key_group_for_key
                keys = list(restored.keys(COUNT.name))
                assert keys, "every third of 2000 keys holds some keys"
                assert all(key_group_for_key(k, MAX_P) in own for k in keys), \
                    f"subtask {index} restored keys outside its key groups {own}"
            finally:
                restored.dispose()


INCREMENTAL = SnapshotOptions(incremental=True)


class _WriteOnlyStreams(CheckpointStreams):
    """Writes through to ``streams``; any read fails (local recovery must not read storage)."""

    def __init__(self, streams: CheckpointStreams) -> None:
        self._streams = streams

    def create_output(self, *args: Any, **kwargs: Any) -> Any:
        return self._streams.create_output(*args, **kwargs)

    def read(self, handle: Any) -> bytes:
        raise AssertionError(f"local recovery read {handle} from checkpoint storage")

    def read_range(self, handle: Any, offset: int, length: int) -> bytes:
        raise AssertionError(f"local recovery read {handle} from checkpoint storage")


class LocalRecoveryTests(BackendTestBase):
    """A backend declaring ``local_recovery`` keeps its working state in ``working_dir`` across
    ``dispose`` and reopens it with ``resume_local_state``, without reading checkpoint storage;
    later snapshots build on the resumed state (skipped without the capability)."""

    conformance_level = "snapshots"

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_working_state_is_reopened_without_reading_storage(self, state_backend, tmp_path, mode):
        requires(state_backend, "local_recovery")
        options = snapshot_options_for(mode, state_backend)
        streams, working = InlineStreams(), str(tmp_path / "working")
        backend = open_keyed_backend(state_backend, str(tmp_path / "local"), working_dir=working)
        try:
            expected = _fill(backend, range(800))
            handle = backend.snapshot(1, options).write(streams)
            backend.notify_checkpoint_complete(1)
        finally:
            backend.dispose()
        resumed = open_keyed_backend(state_backend, str(tmp_path / "local"), restore_handles=[handle],
                                     restore_streams=_WriteOnlyStreams(streams),
                                     working_dir=working, resume_local_state=True)
        try:
            assert_same_state(_read_all(resumed), expected, "working state reopened by local recovery")
            expected.update(_fill(resumed, range(600, 1000), base=7))  # then a snapshot on top of it
            second = resumed.snapshot(2, options).write(streams)
        finally:
            resumed.dispose()
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[second],
                                      restore_streams=streams)
        try:
            assert_same_state(_read_all(restored), expected, "snapshot taken after local recovery, restored")
        finally:
            restored.dispose()


class IncrementalSnapshotTests(BackendTestBase):
    """Incremental snapshots that build on completed ones (skipped without the capability)."""

    conformance_level = "incremental"

    @pytest.fixture
    def snapshot_streams(self) -> CheckpointStreams:
        return InlineStreams()

    def _checkpoint(self, backend: KeyedStateBackend, checkpoint_id: int, streams: CheckpointStreams,
                    complete: bool = True) -> Any:
        handle = backend.snapshot(checkpoint_id, INCREMENTAL).write(streams)
        if complete:
            backend.notify_checkpoint_complete(checkpoint_id)
        else:
            backend.notify_checkpoint_aborted(checkpoint_id)
        return handle

    def _restored(self, state_backend: StateBackend, tmp_path: Any, handle: Any, streams: CheckpointStreams,
                  name: str, **kwargs: Any) -> KeyedStateBackend:
        return open_keyed_backend(state_backend, str(tmp_path / name), restore_handles=[handle],
                                  restore_streams=streams, **kwargs)

    def test_chain_of_completed_checkpoints_restores_every_key(self, state_backend, keyed_backend,
                                                                snapshot_streams, tmp_path):
        requires(state_backend, "incremental_snapshots")
        expected = _fill(keyed_backend, range(1500))
        handle = self._checkpoint(keyed_backend, 1, snapshot_streams)
        for checkpoint_id in range(2, 8):
            expected.update(_fill(keyed_backend, range(checkpoint_id * 37, 1500, 50), base=checkpoint_id * 1000))
            count, last, sums = (keyed_backend.get_state(d) for d in (COUNT, LAST, SUMS))
            for k in range(checkpoint_id, 1500, 97):  # clears and removals must reach the restored state
                key = f"key-{k}"
                set_key(keyed_backend, key)
                if k % 2:
                    for state in (count, last, sums):
                        state.clear()
                    expected.pop(key, None)
                else:
                    sums.remove("b")
                    last.add(checkpoint_id)
                    if key in expected:
                        c, lst, sm = expected[key]
                        expected[key] = (c, lst + [checkpoint_id], {k2: v for k2, v in sm.items() if k2 != "b"})
            handle = self._checkpoint(keyed_backend, checkpoint_id, snapshot_streams)
            restored = self._restored(state_backend, tmp_path, handle, snapshot_streams, f"r{checkpoint_id}")
            try:
                assert_same_state(_read_all(restored), expected, f"state restored from checkpoint {checkpoint_id}")
            finally:
                restored.dispose()

    def test_aborted_checkpoint_changes_reach_the_next_one(self, state_backend, keyed_backend,
                                                           snapshot_streams, tmp_path):
        requires(state_backend, "incremental_snapshots")
        expected = _fill(keyed_backend, range(500))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(_fill(keyed_backend, range(0, 500, 3), base=2000))  # only in aborted checkpoint 2
        self._checkpoint(keyed_backend, 2, snapshot_streams, complete=False)
        expected.update(_fill(keyed_backend, range(1, 500, 7), base=3000))
        handle = self._checkpoint(keyed_backend, 3, snapshot_streams)
        restored = self._restored(state_backend, tmp_path, handle, snapshot_streams, "restored")
        try:
            assert_same_state(_read_all(restored), expected, "changes of an aborted checkpoint were lost")
        finally:
            restored.dispose()

    def test_pending_checkpoint_not_yet_confirmed(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        """Checkpoint 3 is taken while 2 is still pending: it must hold 2's changes too."""
        requires(state_backend, "incremental_snapshots")
        expected = _fill(keyed_backend, range(400))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(_fill(keyed_backend, range(0, 400, 2), base=5000))
        pending = keyed_backend.snapshot(2, INCREMENTAL)
        expected.update(_fill(keyed_backend, range(1, 400, 5), base=6000))
        third = keyed_backend.snapshot(3, INCREMENTAL)
        pending.write(snapshot_streams)
        handle = third.write(snapshot_streams)
        keyed_backend.notify_checkpoint_complete(3)
        restored = self._restored(state_backend, tmp_path, handle, snapshot_streams, "restored")
        try:
            assert_same_state(_read_all(restored), expected, "checkpoint 3, taken while 2 was pending")
        finally:
            restored.dispose()

    def test_rescale_from_an_incremental_chain(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        requires(state_backend, "incremental_snapshots")
        expected = _fill(keyed_backend, range(2000))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(_fill(keyed_backend, range(0, 2000, 9), base=7000))
        handle = self._checkpoint(keyed_backend, 2, snapshot_streams)
        found: dict[str, Any] = {}
        for index in range(3):
            restored = self._restored(state_backend, tmp_path, handle, snapshot_streams, f"part-{index}",
                                      subtask_index=index, parallelism=3)
            try:
                part = _read_all(restored)
                assert not part.keys() & found.keys(), "a key was restored by two subtasks"
                found.update(part)
            finally:
                restored.dispose()
        assert_same_state(found, expected, "state of 3 subtasks restored from an incremental chain")


def _mutate_everything(backend: KeyedStateBackend, salt: int = 0) -> None:
    count, last, sums = backend.get_state(COUNT), backend.get_state(LAST), backend.get_state(SUMS)
    mean, maximum = backend.get_state(MEAN), backend.get_state(MAXIMUM)
    for k in range(0, 3000, 3):
        set_key(backend, f"key-{k}")
        count.update(-1 - salt)
        last.add(-7)
        sums.put("a", -1)
        sums.remove("b")
        mean.add(1000 + salt)
        maximum.add(10 ** 6)
    for k in range(1, 3000, 3):
        set_key(backend, f"key-{k}")
        count.clear()
        last.clear()
        sums.clear()
    for k in range(5000, 5100):
        set_key(backend, f"key-{k}")
        count.update(k)


class RescaleTests(BackendTestBase):
    """Checkpoint at one parallelism, continue at another, compare every key with the oracle."""

    conformance_level = "rescale"

    @pytest.fixture
    def checkpoint_storage(self) -> CheckpointStorage | None:
        """The storage the rescaled jobs checkpoint to; None = the ``jobmanager`` storage."""
        return None

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    @pytest.mark.parametrize("old,new", RESCALE_MATRIX, ids=[f"{a}to{b}" for a, b in RESCALE_MATRIX])
    def test_rescale_matrix(self, state_backend, checkpoint_storage, tmp_path, old, new, mode):
        rows_1, rows_2 = make_rows(3000, 800, seed=old), make_rows(2000, 800, seed=new + 1000)
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=old, max_parallelism=MAX_P,
                             state_backend=state_backend, local_dir=str(tmp_path / "local"),
                             storage=checkpoint_storage, job_id=f"rescale-{old}-{new}-{mode}",
                             incremental=snapshot_options_for(mode, state_backend).incremental)
        runner.run_epoch(rows_1)
        runner.rescale(new)
        outputs = runner.run_epoch(rows_2)
        assert_same_rows(outputs, expected_outputs(rows_2, rows_1), f"outputs after rescale {old}->{new}")
        found = dump_state(runner.latest_metadata(), runner.streams, str(tmp_path), state_backend=state_backend,
                           parallelism=new, operator_id=runner.operator_id)
        assert_same_state(found, expected_state(rows_1 + rows_2), f"state after rescale {old}->{new}")

    @pytest.mark.parametrize("old,new", [(4, 2), (2, 3)], ids=["4to2", "2to3"])
    def test_operator_state_redistribution(self, state_backend, checkpoint_storage, tmp_path, old, new):
        rows = make_rows(1000, 200, seed=7)
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=old, max_parallelism=MAX_P,
                             state_backend=state_backend, local_dir=str(tmp_path / "local"),
                             storage=checkpoint_storage, job_id=f"redistribute-{old}-{new}")
        runner.run_epoch(rows)
        runner.rescale(new)
        runner.run_epoch([])
        metadata = runner.latest_metadata()
        assert metadata is not None
        seen_rows: list[int] = []
        for state in _operator_states(state_backend, metadata, runner.streams, runner.operator_id, new):
            seen_rows.extend(state["list"])
            assert set(state["union"]) == {1, 2}, "union list state must give every subtask every element"
            assert state["broadcast"] == {"categories": ["a", "b", "c", "d"]}
        assert sum(seen_rows) == len(rows), "list state elements were lost or duplicated on redistribution"
        assert len(seen_rows) == old + new, "every element of list state goes to exactly one subtask"

    @pytest.mark.parametrize("new", [2, 3], ids=["same-parallelism", "rescaled"])
    def test_operator_state_restores_alike_from_checkpoint_and_savepoint(self, state_backend, checkpoint_storage,
                                                                         tmp_path, new):
        """A savepoint holds each subtask's operator state as the checkpoint it was made from did:
        list, union list and broadcast state restore identically from either."""
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                             state_backend=state_backend, local_dir=str(tmp_path / "local"),
                             storage=checkpoint_storage, job_id=f"operator-state-from-savepoint-{new}")
        runner.run_epoch(make_rows(400, 100, seed=11))
        runner.run_epoch(make_rows(400, 100, seed=12))  # every subtask's union state now holds every epoch
        checkpoint = runner.latest_metadata()
        assert checkpoint is not None
        from_checkpoint = _operator_states(state_backend, checkpoint, runner.streams, runner.operator_id, new)
        from_savepoint = _operator_states(state_backend, runner.savepoint(), InlineStreams(), runner.operator_id, new)
        assert from_checkpoint[0]["union"], "the workload's union list state is empty"
        for index, (expected, found) in enumerate(zip(from_checkpoint, from_savepoint)):
            assert found == expected, (f"subtask {index} of {new}: operator state restored from the savepoint "
                                       f"differs from the checkpoint's: {found} != {expected}")



def _operator_states(state_backend: StateBackend, metadata: CheckpointMetadata, streams: CheckpointStreams,
                     operator_id: str, parallelism: int) -> list[dict[str, Any]]:
    """The workload's operator state of every subtask, restored at ``parallelism``."""
    operator = metadata.operator(operator_id)
    found = []
    for index in range(parallelism):
        backend = state_backend.create_operator_backend(OperatorBackendParams(
            SubtaskInfo(metadata.job_id, operator.operator_id, index, parallelism, operator.max_parallelism),
            assign(operator, index, parallelism).operator, streams))
        try:
            found.append({"list": backend.get_list_state("rows-seen", Int64Serializer()).get(),
                          "union": backend.get_union_list_state("epochs", Int64Serializer()).get(),
                          "broadcast": dict(backend.get_broadcast_state("config").items())})
        finally:
            backend.dispose()
    return found


class OnFilesystemStorage:
    """Mix in before ``SnapshotRestoreTests``/``RescaleTests`` to write snapshots as files (local
    ``filesystem`` storage, small inline threshold) instead of inline bytes."""

    @pytest.fixture
    def snapshot_streams(self, tmp_path: Any) -> CheckpointStreams:
        return _small_threshold_files(str(tmp_path / "snapshots")).create_access("conformance-job").streams(1, "op-0")

    @pytest.fixture
    def checkpoint_storage(self, tmp_path: Any) -> CheckpointStorage:
        return _small_threshold_files(str(tmp_path / "checkpoints"))


def _small_threshold_files(directory: str) -> CheckpointStorage:
    """The ``filesystem`` storage at ``directory``, every stream above 1 KiB a file."""
    from statekit.registry import storage_class

    return storage_class("filesystem").from_settings(directory, {"memory-threshold": "1024"})
