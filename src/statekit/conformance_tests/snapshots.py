"""Snapshot/restore level: round trips, async-snapshot isolation, serializer compatibility,
corruption detection, and local recovery of working state.

Override ``state_backend`` (and optionally ``snapshot_streams`` to write through a storage).
"""
from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from statekit.backends.common.canonical import MAX_BATCH_ROWS
from statekit.conformance_tests.base import BackendTestBase, open_keyed_backend, requires, set_key
from statekit.conformance_tests.compare import assert_same_rows, assert_same_state
from statekit.conformance_tests.expect import expect_error
from statekit.conformance_tests.key_formats import KeyFormatTests
from statekit.conformance_tests.snapshot_support import (
    MAX_P, NEXT_SNAPSHOTS, SNAPSHOT_MODES, OnFilesystemStorage, assert_restores, fill_states, mutate_everything,
    next_snapshot_options, read_states, records_of, snapshot_options_for,
)
from statekit.conformance_tests.workload import (
    COUNT, LAST, MEAN, SUMS, WorkloadFunction, cell_rows, dump_state, expected_state, make_rows, oracle_cells,
    read_key_state,
)
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.savepoints import snapshot_as_savepoint
from statekit.runtime.snapshot_upload import SnapshotUpload
from statekit.runtime.task import KeyedTask
from statekit.serializers import Int64Serializer, StringSerializer
from statekit.spi import (
    SnapshotOptions, CorruptStateError, IncompatibleSerializerError, InlineStateHandle, KeyedStateBackend,
    KeyGroupRange, KeyGroupsStateHandle, ListStateDescriptor, MapStateDescriptor, SnapshotError, SnapshotType,
    StateBackend, StateHandle, SubtaskInfo, ValueStateDescriptor, key_group_for_key,
)
from statekit.spi.storage import CheckpointStreams, CompletedCheckpointPointer, ResolvedCheckpoint
from statekit.storage.inline import InlineStreams


class SnapshotRestoreTests(KeyFormatTests):
    def test_round_trip_every_key_and_value(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        expected = fill_states(keyed_backend, range(2000))
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        assert handle is not None, "a backend with state must produce a handle"
        json.dumps(handle.to_json())  # handles are JSON-serializable
        handle = StateHandle.from_json(json.loads(json.dumps(handle.to_json())))
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            assert_same_state(read_states(restored), expected, "state restored from the snapshot")
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
        fill_states(keyed_backend, range(100))
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
        """Namespaces restore apart, also those equal in Python but serialized apart (1, 1.0 and
        True)."""
        windows = (None, 1, 20, 1.0, True)
        state = keyed_backend.get_state(ValueStateDescriptor("windowed"))
        for k in range(50):
            set_key(keyed_backend, k)
            for w, window in enumerate(windows):
                state.set_current_namespace(window)
                state.update((k, w))
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            state = restored.get_state(ValueStateDescriptor("windowed"))
            for k in range(50):
                set_key(restored, k)
                for w, window in enumerate(windows):
                    state.set_current_namespace(window)
                    assert state.value() == (k, w), \
                        f"key {k} in namespace {window!r} ({type(window).__name__}) restored as {state.value()!r}"
            for window in windows[1:]:
                assert sorted(restored.keys("windowed", window)) == list(range(50)), \
                    f"keys in namespace {window!r} ({type(window).__name__}) after restore"
        finally:
            restored.dispose()

    def test_list_cells_spanning_record_batches_restore_whole(self, state_backend, keyed_backend, snapshot_streams,
                                                             snapshot_options, tmp_path):
        """List cells with more elements than a record batch holds, and cells of a key group whose
        rows cross a batch boundary, restore with every element, from a snapshot and from the next
        one (with incremental snapshots: a delta that rewrites them)."""
        history = keyed_backend.get_state(ListStateDescriptor("history", Int64Serializer()))
        keys = [k for k in range(2000) if key_group_for_key(k, MAX_P) == key_group_for_key(0, MAX_P)][:3]
        expected = {keys[0]: list(range(MAX_BATCH_ROWS + 10)), keys[1]: list(range(MAX_BATCH_ROWS // 2 + 7)),
                    keys[2]: list(range(MAX_BATCH_ROWS // 2 + 11))}
        for checkpoint_id in (1, 2):
            for key, elements in expected.items():
                set_key(keyed_backend, key)
                history.update(elements)
            handle = keyed_backend.snapshot(checkpoint_id, snapshot_options).write(snapshot_streams)
            keyed_backend.notify_checkpoint_complete(checkpoint_id)
            restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams, name=f"r{checkpoint_id}")
            try:
                found = restored.get_state(ListStateDescriptor("history", Int64Serializer()))
                for key, elements in expected.items():
                    set_key(restored, key)
                    held = list(found.get())
                    assert held == elements, (f"snapshot {checkpoint_id}: key {key}'s list of {len(elements)} "
                                              f"elements restored with {len(held)}")
            finally:
                restored.dispose()
            expected = {key: elements + [checkpoint_id] for key, elements in expected.items()}

    def _next_snapshot_after_a_restore(self, state_backend: StateBackend, keyed_backend: KeyedStateBackend,
                                       streams: CheckpointStreams, options: SnapshotOptions,
                                       next_options: SnapshotOptions, tmp_path: Any,
                                       epoch: Any = None) -> tuple[StateHandle | None, dict[str, Any]]:
        """Fill the states and checkpoint them with ``options`` (completed); restore the checkpoint
        into a new backend, run ``epoch(backend, expected)`` on it if given, and take its next
        snapshot with ``next_options``: the handle, and the state it must hold."""
        expected = fill_states(keyed_backend, range(300))
        first = keyed_backend.snapshot(1, options).write(streams)
        keyed_backend.notify_checkpoint_complete(1)
        middle = self._restore(state_backend, tmp_path, [first], streams, name="middle")
        try:
            if epoch is not None:
                epoch(middle, expected)
            second = middle.snapshot(2, next_options).write(streams)
            middle.notify_checkpoint_complete(2)
        finally:
            middle.dispose()
        return second, expected

    @pytest.mark.parametrize("next_snapshot", NEXT_SNAPSHOTS)
    def test_state_not_registered_again_is_carried_forward(self, state_backend, keyed_backend, snapshot_streams,
                                                           snapshot_options, tmp_path, next_snapshot):
        """Restored state the job does not touch in an epoch must survive the next snapshot, of any
        kind: a backend knows every state it restored before any is registered again (a savepoint
        conversion and the state reader register none)."""
        second, expected = self._next_snapshot_after_a_restore(
            state_backend, keyed_backend, snapshot_streams, snapshot_options,
            next_snapshot_options(next_snapshot, state_backend), tmp_path)  # no get_state call at all
        assert_restores(state_backend, str(tmp_path / "restored"), [second], snapshot_streams, expected,
                        f"restored state not registered again before the {next_snapshot} snapshot of the middle epoch")

    @pytest.mark.parametrize("next_snapshot", ["full", "incremental"])
    def test_a_state_registered_in_a_later_epoch_survives_the_next_checkpoint(
            self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path, next_snapshot):
        """After a restore, the job registers and writes one state (as a function registering its
        states in ``process()`` does); the states it registers only in a later epoch, untouched in
        this one, are in this epoch's full or incremental checkpoint."""
        def epoch(middle: KeyedStateBackend, expected: dict[str, Any]) -> None:
            count = middle.get_state(COUNT)
            for k in range(0, 300, 2):
                set_key(middle, f"key-{k}")
                count.update(-1 - k)
                expected[f"key-{k}"] = (-1 - k, *expected[f"key-{k}"][1:])

        second, expected = self._next_snapshot_after_a_restore(
            state_backend, keyed_backend, snapshot_streams, snapshot_options,
            next_snapshot_options(next_snapshot, state_backend), tmp_path, epoch)
        assert_restores(state_backend, str(tmp_path / "restored"), [second], snapshot_streams, expected,
                        f"states registered after the {next_snapshot} checkpoint of the epoch that wrote only "
                        f"{COUNT.name!r}")

    def test_state_restored_at_another_parallelism_is_in_a_savepoint_before_any_is_registered(
            self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        """A snapshot restored by two subtasks (each reading its half of the key groups), with no state
        registered: their savepoints hold every state, restored together again."""
        expected = fill_states(keyed_backend, range(300))
        first = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        halves = []
        for index in range(2):
            half = open_keyed_backend(state_backend, str(tmp_path / f"half-{index}"), subtask_index=index,
                                      parallelism=2, restore_handles=[first], restore_streams=snapshot_streams)
            try:
                halves.append(half.snapshot(2, SnapshotOptions(SnapshotType.SAVEPOINT)).write(snapshot_streams))
            finally:
                half.dispose()
        assert_restores(state_backend, str(tmp_path / "restored"), halves, snapshot_streams, expected,
                        "the savepoints of two subtasks that restored a snapshot's halves and registered no state")

    # --- async snapshot isolation
    def test_writes_after_sync_part_do_not_leak(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        expected = fill_states(keyed_backend, range(1000))
        mean = keyed_backend.get_state(MEAN)
        set_key(keyed_backend, "key-1")
        mean.add(10)
        pending = keyed_backend.snapshot(1, snapshot_options)
        mutate_everything(keyed_backend)
        handle = pending.write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            assert_same_state(read_states(restored), expected, "writes made after the synchronous part leaked into "
                                                             "the snapshot")
            set_key(restored, "key-1")
            assert restored.get_state(MEAN).get() == 10, "an in-place accumulator update leaked into the snapshot"
        finally:
            restored.dispose()

    def test_a_pending_snapshot_writes_once(self, state_backend, keyed_backend, snapshot_streams, snapshot_options,
                                            tmp_path):
        """``write`` after ``release`` (an aborted checkpoint) or after a first ``write`` is a
        ``SnapshotError``, never ``None``, which would read as a backend without state; the backend's
        next snapshot holds its state."""
        expected = fill_states(keyed_backend, range(300))
        aborted = keyed_backend.snapshot(1, snapshot_options)
        aborted.release()
        with expect_error(SnapshotError, "write() of a released pending snapshot must fail"):
            aborted.write(snapshot_streams)
        pending = keyed_backend.snapshot(2, snapshot_options)
        handle = pending.write(snapshot_streams)
        with expect_error(SnapshotError, "a second write() of a pending snapshot must fail"):
            pending.write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            assert_same_state(read_states(restored), expected, "state restored after a refused write()")
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

    def test_namespaces_survive_a_backend_switch(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        """State and timers in namespaces equal in Python but not in bytes (1, True, 1.0) stay apart
        through savepoints from this backend into the heap backend and back."""
        from statekit.backends.heap import HeapStateBackend

        namespaces = (1, True, 1.0)
        want = sorted((type(ns).__name__, repr(ns), i) for i, ns in enumerate(namespaces))
        savepoint = SnapshotOptions(SnapshotType.SAVEPOINT)

        def write(backend: KeyedStateBackend) -> None:
            state = backend.get_state(ValueStateDescriptor("windowed"))
            timers = backend.create_timer_queue("_timers/windows")
            set_key(backend, "k")
            for i, namespace in enumerate(namespaces):
                state.set_current_namespace(namespace)
                state.update(i)
                timers.add(100 + i, namespace)

        def check(backend: KeyedStateBackend, where: str) -> None:
            state = backend.get_state(ValueStateDescriptor("windowed"))
            set_key(backend, "k")
            values = []
            for namespace in namespaces:
                state.set_current_namespace(namespace)
                values.append((type(namespace).__name__, repr(namespace), state.value()))
            assert sorted(values) == want, f"{where}: state per namespace is {sorted(values)}, expected {want}"
            timers = backend.create_timer_queue("_timers/windows")
            fired = sorted((type(t.namespace).__name__, repr(t.namespace), t.timestamp - 100)
                           for t in iter(lambda: timers.poll(1000), None))
            assert fired == want, f"{where}: timers fired in namespaces {fired}, expected {want}"

        write(keyed_backend)
        handle = keyed_backend.snapshot(1, savepoint).write(snapshot_streams)
        heap = self._restore(HeapStateBackend(), tmp_path, [handle], snapshot_streams, name="heap")
        try:
            back = heap.snapshot(2, savepoint).write(snapshot_streams)
            check(heap, "the heap backend restored from this backend")
        finally:
            heap.dispose()
        restored = self._restore(state_backend, tmp_path, [back], snapshot_streams)
        try:
            check(restored, "after switching to the heap and back")
        finally:
            restored.dispose()

    def test_overlapping_snapshots_each_see_their_own_point(self, state_backend, keyed_backend,
                                                            snapshot_streams, snapshot_options, tmp_path):
        first_expected = fill_states(keyed_backend, range(500))
        first = keyed_backend.snapshot(1, snapshot_options)
        second_expected = fill_states(keyed_backend, range(250, 750), base=10_000)
        second = keyed_backend.snapshot(2, snapshot_options)
        mutate_everything(keyed_backend)
        second_handle = second.write(snapshot_streams)
        first_handle = first.write(snapshot_streams)
        want_second = {**first_expected, **second_expected}
        for name, handle, want in (("one", first_handle, first_expected), ("two", second_handle, want_second)):
            restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams, name=name)
            try:
                assert_same_state(read_states(restored), want, f"snapshot {name} does not hold its own point in time")
            finally:
                restored.dispose()

    def test_older_snapshot_written_after_a_newer_one_keeps_its_point(self, state_backend, keyed_backend,
                                                                      snapshot_streams, snapshot_options, tmp_path):
        """Snapshot 2 is written before snapshot 1, then the state changes: 1, written last, holds
        its own point in time, not the writes made once 2 was done."""
        first_expected = fill_states(keyed_backend, range(500))
        first = keyed_backend.snapshot(1, snapshot_options)
        second = keyed_backend.snapshot(2, snapshot_options)
        second.write(snapshot_streams)
        mutate_everything(keyed_backend)
        fill_states(keyed_backend, range(500), base=20_000)
        first_handle = first.write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [first_handle], snapshot_streams)
        try:
            assert_same_state(read_states(restored), first_expected,
                              "writes made after a newer snapshot was written reached an older pending one")
        finally:
            restored.dispose()

    def test_write_runs_concurrently_with_processing(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        requires(state_backend, "async_snapshots")
        expected = fill_states(keyed_backend, range(3000))
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
            mutate_everything(keyed_backend, salt=round_)
        writer.join(timeout=120)
        assert "error" not in result, f"the asynchronous part failed while processing continued: {result.get('error')!r}"
        restored = self._restore(state_backend, tmp_path, [result["handle"]], snapshot_streams)
        try:
            assert_same_state(read_states(restored), expected, "a snapshot written while processing continued")
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
            task.process_all(records_of(first), [])
            upload = SnapshotUpload(task.snapshot(), snapshot_streams, concurrent=True)
            task.process_all(records_of(later), [])
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
        ValueStateDescriptor("typed"),  # the default (msgpack) cannot read Int64 bytes
    ], ids=["string", "default"])
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
        fill_states(keyed_backend, range(500))
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
                read_states(backend)
            finally:
                backend.dispose()

    def test_truncated_stream_is_a_clear_error(self, state_backend, keyed_backend, tmp_path):
        fill_states(keyed_backend, range(500))
        handle = keyed_backend.snapshot(1).write(InlineStreams())
        data = handle.stream.data  # type: ignore[attr-defined]
        truncated = KeyGroupsStateHandle(handle.key_group_range, InlineStateHandle(data[: len(data) // 2]),
                                         handle.key_groups, handle.key_serializer, handle.states, handle.format)
        with pytest.raises(CorruptStateError):
            backend = self._restore(state_backend, tmp_path, [truncated], InlineStreams())
            try:
                read_states(backend)
            finally:
                backend.dispose()

    # --- key groups on restore
    def test_restore_reads_only_own_key_groups(self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        fill_states(keyed_backend, range(2000))
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        for index in range(3):
            restored = open_keyed_backend(state_backend, str(tmp_path / f"part-{index}"), subtask_index=index,
                                          parallelism=3, restore_handles=[handle], restore_streams=snapshot_streams)
            try:
                own = KeyGroupRange.of_subtask(MAX_P, 3, index)
                keys = list(restored.keys(COUNT.name))
                assert keys, "every third of 2000 keys holds some keys"
                assert all(key_group_for_key(k, MAX_P) in own for k in keys), \
                    f"subtask {index} restored keys outside its key groups {own}"
            finally:
                restored.dispose()


class _OperatorBackendFails(StateBackend):
    """The backend under test, except that no operator backend can be created; remembers the
    keyed backends it opened and which of them were disposed."""

    name = "conformance-operator-backend-fails"

    def __init__(self, inner: StateBackend) -> None:
        super().__init__()
        self.inner = inner
        self.opened: list[KeyedStateBackend] = []
        self.disposed: list[KeyedStateBackend] = []

    def create_keyed_backend(self, params: Any) -> KeyedStateBackend:
        backend = self.inner.create_keyed_backend(params)
        dispose = backend.dispose

        def recorded_dispose() -> None:
            self.disposed.append(backend)
            dispose()
        backend.dispose = recorded_dispose  # type: ignore[method-assign]
        self.opened.append(backend)
        return backend

    def create_operator_backend(self, params: Any) -> Any:
        raise RuntimeError("injected: no operator backend")


class SavepointConversionTests(BackendTestBase):
    """Converting a checkpoint to a savepoint disposes what it opened when a backend fails."""

    def test_a_failed_conversion_disposes_the_keyed_backend(self, state_backend, tmp_path):
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, state_backend=state_backend,
                             local_dir=str(tmp_path / "job"))
        runner.run_epoch(make_rows(200, 50, seed=3))
        failing = _OperatorBackendFails(state_backend)
        local_dir = str(tmp_path / "conversion")
        with expect_error(RuntimeError, "a savepoint conversion whose operator backend fails must fail"):
            snapshot_as_savepoint(runner.latest_metadata(), runner.streams, failing, lambda subtask: InlineStreams(),
                                  local_dir=local_dir)
        assert failing.opened, "the conversion opened no keyed backend"
        assert failing.disposed == failing.opened, (
            f"{len(failing.opened) - len(failing.disposed)} keyed backend(s) the failed conversion opened were "
            f"never disposed (their files and locks stay behind)")
        savepoint = snapshot_as_savepoint(runner.latest_metadata(), runner.streams, state_backend,
                                          lambda subtask: InlineStreams(), local_dir=local_dir)
        assert savepoint.is_savepoint, "the state could not be converted again after the failed conversion"


    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_a_savepoint_of_every_checkpoint_mode_holds_every_cell(self, state_backend, tmp_path, mode):
        """A savepoint conversion (and the state reader, which converts what it cannot read) runs no
        function, so no state is registered in the backends it restores: each must know every state
        it holds. The savepoint of a job's latest checkpoint, of every snapshot mode, restores every
        key into the heap backend (a backend switch), and reading it gives every cell."""
        options = snapshot_options_for(mode, state_backend)
        epochs = [make_rows(1000, 200, seed=seed) for seed in (21, 22)]
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                             state_backend=state_backend, local_dir=str(tmp_path / "job"),
                             incremental=options.incremental, checkpoint_format=options.format)
        for rows in epochs:
            runner.run_epoch(rows)
        savepoint = runner.savepoint()
        rows = [row for rows in epochs for row in rows]
        switched = dump_state(savepoint, InlineStreams(), str(tmp_path / "switch"), operator_id=runner.operator_id)
        assert_same_state(switched, expected_state(rows),
                          f"the savepoint of a {mode} checkpoint, restored into the heap backend")
        reader = SnapshotReader(ResolvedCheckpoint(
            CompletedCheckpointPointer(savepoint.checkpoint_id, "savepoint", is_savepoint=True), savepoint.to_bytes(),
            InlineStreams()))
        operator = reader.operator(runner.operator_id)
        cells = cell_rows(cell for index in range(operator.parallelism)
                          for cell in reader.cells(operator, index, operator.parallelism))
        assert_same_rows(cells, oracle_cells(rows), f"the cells read from the savepoint of a {mode} checkpoint")


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

    @staticmethod
    def _checkpoint_and_resume(state_backend: StateBackend, tmp_path: Any, mode: str,
                               keys: range) -> tuple[KeyedStateBackend, dict[str, Any], CheckpointStreams]:
        """Fill ``keys`` into a backend with a working directory, checkpoint it in ``mode``, dispose it
        and reopen its working state by local recovery: the resumed backend, its expected state and
        the streams of the checkpoint."""
        requires(state_backend, "local_recovery")
        options = snapshot_options_for(mode, state_backend)
        streams, working = InlineStreams(), str(tmp_path / "working")
        backend = open_keyed_backend(state_backend, str(tmp_path / "local"), working_dir=working)
        try:
            expected = fill_states(backend, keys)
            handle = backend.snapshot(1, options).write(streams)
            backend.notify_checkpoint_complete(1)
        finally:
            backend.dispose()
        resumed = open_keyed_backend(state_backend, str(tmp_path / "local"), restore_handles=[handle],
                                     restore_streams=_WriteOnlyStreams(streams),
                                     working_dir=working, resume_local_state=True)
        return resumed, expected, streams

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_working_state_is_reopened_without_reading_storage(self, state_backend, tmp_path, mode):
        resumed, expected, streams = self._checkpoint_and_resume(state_backend, tmp_path, mode, range(800))
        try:
            assert_same_state(read_states(resumed), expected, "working state reopened by local recovery")
            expected.update(fill_states(resumed, range(600, 1000), base=7))  # then a snapshot on top of it
            second = resumed.snapshot(2, snapshot_options_for(mode, state_backend)).write(streams)
        finally:
            resumed.dispose()
        assert_restores(state_backend, str(tmp_path / "restored"), [second], streams, expected,
                        "snapshot taken after local recovery, restored")

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_resumed_state_is_in_a_savepoint_before_any_is_registered(self, state_backend, tmp_path, mode):
        """Working state reopened by local recovery, with no state registered yet: a savepoint of it
        holds every state (a function that registers its states lazily may not touch one all epoch)."""
        resumed, expected, streams = self._checkpoint_and_resume(state_backend, tmp_path, mode, range(300))
        try:
            second = resumed.snapshot(2, SnapshotOptions(SnapshotType.SAVEPOINT)).write(streams)
        finally:
            resumed.dispose()
        assert_restores(state_backend, str(tmp_path / "restored"), [second], streams, expected,
                        "a savepoint of working state reopened by local recovery, before any state was registered")

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_cells_cleared_between_two_resumes_stay_cleared(self, state_backend, tmp_path, mode):
        """Working state resumed, changed (whole keys cleared, one state of a key cleared, a map entry
        removed), checkpointed and resumed again: what was cleared stays gone, in the reopened working
        state and in the snapshot taken on it (a replay of local files that knows no deletes brings
        cleared cells back)."""
        options = snapshot_options_for(mode, state_backend)
        resumed, expected, streams = self._checkpoint_and_resume(state_backend, tmp_path, mode, range(400))
        try:
            count, last, sums = resumed.get_state(COUNT), resumed.get_state(LAST), resumed.get_state(SUMS)
            for k in range(400):
                key = f"key-{k}"
                set_key(resumed, key)
                if k % 4 == 0:
                    for state in (count, last, sums):
                        state.clear()
                    del expected[key]
                elif k % 4 == 1:
                    last.clear()
                    expected[key] = (expected[key][0], [], expected[key][2])
                elif k % 4 == 2:
                    sums.remove("b")
                    expected[key] = (expected[key][0], expected[key][1], {"a": k})
                else:
                    sums.clear()
                    expected[key] = (expected[key][0], expected[key][1], {})
            handle = resumed.snapshot(2, options).write(streams)
            resumed.notify_checkpoint_complete(2)
        finally:
            resumed.dispose()
        again = open_keyed_backend(state_backend, str(tmp_path / "local"), restore_handles=[handle],
                                   restore_streams=_WriteOnlyStreams(streams), working_dir=str(tmp_path / "working"),
                                   resume_local_state=True)
        try:
            assert_same_state(read_states(again), expected,
                              "working state reopened by a second local recovery, after cells were cleared")
            for descriptor, holds in ((LAST, lambda s: bool(s[1])), (SUMS, lambda s: bool(s[2]))):
                found = sorted(again.keys(descriptor.name))
                want = sorted(key for key, s in expected.items() if holds(s))
                assert found == want, (
                    f"keys() of {descriptor.name!r} after a second local recovery: {len(found)} keys, expected "
                    f"{len(want)}; cleared ones came back, e.g. {sorted(set(found) - set(want))[:3]}")
            third = again.snapshot(3, options).write(streams)
        finally:
            again.dispose()
        assert_restores(state_backend, str(tmp_path / "restored"), [third], streams, expected,
                        "snapshot taken after a second local recovery, restored")


__all__ = ["LocalRecoveryTests", "OnFilesystemStorage", "SavepointConversionTests", "SnapshotRestoreTests"]
