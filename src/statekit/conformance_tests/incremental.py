"""Incremental level: snapshots that build on completed ones, through aborts, pending checkpoints
and a rescale of a chain (skipped for a backend without ``incremental_snapshots``)."""
from __future__ import annotations

import random
from typing import Any

import pytest

from statekit.conformance_tests import chain_model
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.store import CheckpointStore
from statekit.conformance_tests.base import MAX_PARALLELISM, BackendTestBase, open_keyed_backend, requires, set_key
from statekit.conformance_tests.compare import assert_same_state
from statekit.conformance_tests.snapshot_support import INCREMENTAL, fill_states, read_states, small_threshold_files
from statekit.conformance_tests.workload import COUNT, LAST, SUMS
from statekit.spi import (
    KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, SnapshotOptions, StateBackend, ValueStateDescriptor,
)
from statekit.spi.storage import CheckpointStreams
from statekit.storage.inline import InlineStreams


class IncrementalSnapshotTests(BackendTestBase):
    """Incremental snapshots that build on completed ones (skipped without the capability)."""

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

    def _assert_restores(self, state_backend: StateBackend, tmp_path: Any, handle: Any, streams: CheckpointStreams,
                         name: str, expected: dict[str, Any], what: str) -> None:
        """A backend restored from ``handle`` holds ``expected`` (``what``: the assertion's subject)."""
        restored = self._restored(state_backend, tmp_path, handle, streams, name)
        try:
            assert_same_state(read_states(restored), expected, what)
        finally:
            restored.dispose()

    def test_chain_of_completed_checkpoints_restores_every_key(self, state_backend, keyed_backend,
                                                                snapshot_streams, tmp_path):
        requires(state_backend, "incremental_snapshots")
        expected = fill_states(keyed_backend, range(1500))
        handle = self._checkpoint(keyed_backend, 1, snapshot_streams)
        for checkpoint_id in range(2, 8):
            expected.update(fill_states(keyed_backend, range(checkpoint_id * 37, 1500, 50), base=checkpoint_id * 1000))
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
            self._assert_restores(state_backend, tmp_path, handle, snapshot_streams, f"r{checkpoint_id}", expected,
                                  f"state restored from checkpoint {checkpoint_id}")

    def test_namespaced_cells_of_every_kind_through_a_chain(self, state_backend, keyed_backend,
                                                             snapshot_streams, tmp_path):
        """Updates, appends, map puts and clears of cells in several namespaces (windows, among them
        1, 1.0 and True: equal in Python, apart in bytes), some keys changed in several
        of them per checkpoint, reach the state restored from each link."""
        requires(state_backend, "incremental_snapshots")
        value = keyed_backend.get_state(ValueStateDescriptor("windowed-value"))
        elements = keyed_backend.get_state(ListStateDescriptor("windowed-list"))
        entries = keyed_backend.get_state(MapStateDescriptor("windowed-map"))
        states = (value, elements, entries)
        windows = (None, 1, 20, 1.0, True)
        expected: dict[tuple[int, int], tuple[Any, list[int], dict[int, int]]] = {}  # by (key, window index)
        for checkpoint_id in range(1, 5):
            for k in range(checkpoint_id - 1, 80, checkpoint_id):
                set_key(keyed_backend, k)
                for w, window in enumerate(windows):
                    for state in states:
                        state.set_current_namespace(window)
                    if (k + w + checkpoint_id) % 4 == 0:
                        for state in states:
                            state.clear()
                        expected.pop((k, w), None)
                    else:
                        value.update((k, w, checkpoint_id))
                        elements.add(checkpoint_id)
                        entries.put(checkpoint_id % 3, k)
                        _, held, mapping = expected.get((k, w), (None, [], {}))
                        expected[(k, w)] = ((k, w, checkpoint_id), held + [checkpoint_id],
                                            {**mapping, checkpoint_id % 3: k})
            handle = self._checkpoint(keyed_backend, checkpoint_id, snapshot_streams)
            restored = self._restored(state_backend, tmp_path, handle, snapshot_streams, f"r{checkpoint_id}")
            try:
                found = [restored.get_state(d) for d in (ValueStateDescriptor("windowed-value"),
                                                         ListStateDescriptor("windowed-list"),
                                                         MapStateDescriptor("windowed-map"))]
                for k in range(80):
                    set_key(restored, k)
                    for w, window in enumerate(windows):
                        for state in found:
                            state.set_current_namespace(window)
                        held = (found[0].value(), found[1].get(), dict(found[2].items()))
                        assert held == expected.get((k, w), (None, [], {})), \
                            f"key {k}, namespace {window!r} ({type(window).__name__}), restored from checkpoint " \
                            f"{checkpoint_id}"
            finally:
                restored.dispose()

    def test_an_incremental_checkpoint_after_a_full_one_survives_retention(self, state_backend, keyed_backend,
                                                                           tmp_path):
        """Incremental, full, incremental, with one checkpoint retained: completing the full one
        disposes the first, and with it the files only it held. The third builds on the full one
        (the latest completed), so it must not reference what the first one held."""
        requires(state_backend, "incremental_snapshots")
        access = small_threshold_files((tmp_path / "checkpoints").as_uri()).create_access("conformance-job")
        store = CheckpointStore(access, num_retained=1)
        expected = fill_states(keyed_backend, range(1500))
        for checkpoint_id, options in ((1, INCREMENTAL), (2, SnapshotOptions()), (3, INCREMENTAL)):
            if checkpoint_id == 3:
                expected.update(fill_states(keyed_backend, range(0, 1500, 7), base=3000))
            handle = keyed_backend.snapshot(checkpoint_id, options).write(access.streams(checkpoint_id, "op-0"))
            operator = OperatorState("op", 1, MAX_PARALLELISM, (SubtaskState((handle,)),))
            store.add(CheckpointMetadata(checkpoint_id, "conformance-job", {"op": operator}))
            keyed_backend.notify_checkpoint_complete(checkpoint_id)
        self._assert_restores(state_backend, tmp_path, handle, access.restore_streams(), "after-retention", expected,
                              "state restored from incremental checkpoint 3")

    def test_aborted_checkpoint_changes_reach_the_next_one(self, state_backend, keyed_backend,
                                                           snapshot_streams, tmp_path):
        requires(state_backend, "incremental_snapshots")
        expected = fill_states(keyed_backend, range(500))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(fill_states(keyed_backend, range(0, 500, 3), base=2000))  # only in aborted checkpoint 2
        self._checkpoint(keyed_backend, 2, snapshot_streams, complete=False)
        expected.update(fill_states(keyed_backend, range(1, 500, 7), base=3000))
        handle = self._checkpoint(keyed_backend, 3, snapshot_streams)
        self._assert_restores(state_backend, tmp_path, handle, snapshot_streams, "restored", expected,
                              "changes of an aborted checkpoint were lost")

    def test_pending_checkpoint_not_yet_confirmed(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        """Checkpoint 3 is taken while 2 is still pending: it must hold 2's changes too."""
        requires(state_backend, "incremental_snapshots")
        expected = fill_states(keyed_backend, range(400))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(fill_states(keyed_backend, range(0, 400, 2), base=5000))
        pending = keyed_backend.snapshot(2, INCREMENTAL)
        expected.update(fill_states(keyed_backend, range(1, 400, 5), base=6000))
        third = keyed_backend.snapshot(3, INCREMENTAL)
        pending.write(snapshot_streams)
        handle = third.write(snapshot_streams)
        keyed_backend.notify_checkpoint_complete(3)
        self._assert_restores(state_backend, tmp_path, handle, snapshot_streams, "restored", expected,
                              "checkpoint 3, taken while 2 was pending")

    def test_a_late_completion_of_an_older_checkpoint_is_ignored(self, state_backend, keyed_backend,
                                                                 snapshot_streams, tmp_path):
        """Checkpoint 3 completes before 2 is written and confirmed: 3 subsumes 2, so the late
        confirmation of 2 must not set the chain back (4 then builds on 2, without 3's changes)."""
        requires(state_backend, "incremental_snapshots")
        expected = fill_states(keyed_backend, range(1500))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(fill_states(keyed_backend, range(0, 1500, 50), base=2000))
        second = keyed_backend.snapshot(2, INCREMENTAL)
        expected.update(fill_states(keyed_backend, range(1, 1500, 50), base=3000))
        self._checkpoint(keyed_backend, 3, snapshot_streams)
        second.write(snapshot_streams)
        keyed_backend.notify_checkpoint_complete(2)
        expected.update(fill_states(keyed_backend, range(2, 1500, 50), base=4000))
        handle = self._checkpoint(keyed_backend, 4, snapshot_streams)
        self._assert_restores(state_backend, tmp_path, handle, snapshot_streams, "restored", expected,
                              "checkpoint 4, after a late confirmation of 2")

    def test_an_incremental_checkpoint_taken_while_a_full_one_is_pending_survives_retention(
            self, state_backend, keyed_backend, tmp_path):
        """Full checkpoint 2 is pending when incremental 3 is taken; 2 completes (retention, one
        checkpoint retained, disposes 1 and the files only it held), then 3: 3 must not build on 1."""
        requires(state_backend, "incremental_snapshots")
        access = small_threshold_files((tmp_path / "checkpoints").as_uri()).create_access("conformance-job")
        store = CheckpointStore(access, num_retained=1)

        def complete(checkpoint_id: int, pending: Any) -> Any:
            handle = pending.write(access.streams(checkpoint_id, "op-0"))
            operator = OperatorState("op", 1, MAX_PARALLELISM, (SubtaskState((handle,)),))
            store.add(CheckpointMetadata(checkpoint_id, "conformance-job", {"op": operator}))
            keyed_backend.notify_checkpoint_complete(checkpoint_id)
            return handle

        expected = fill_states(keyed_backend, range(1500))
        complete(1, keyed_backend.snapshot(1, INCREMENTAL))
        expected.update(fill_states(keyed_backend, range(0, 1500, 7), base=2000))
        full = keyed_backend.snapshot(2, SnapshotOptions())
        expected.update(fill_states(keyed_backend, range(1, 1500, 7), base=3000))
        third = keyed_backend.snapshot(3, INCREMENTAL)
        complete(2, full)
        handle = complete(3, third)
        self._assert_restores(state_backend, tmp_path, handle, access.restore_streams(), "after-retention", expected,
                              "incremental checkpoint 3, taken while full 2 was pending")

    def test_a_checkpoint_id_taken_again_after_its_abort_holds_both_attempts_changes(
            self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        requires(state_backend, "incremental_snapshots")
        expected = fill_states(keyed_backend, range(1500))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(fill_states(keyed_backend, range(0, 1500, 40), base=2000))  # only in the aborted attempt
        aborted = keyed_backend.snapshot(2, INCREMENTAL)
        aborted.release()
        keyed_backend.notify_checkpoint_aborted(2)
        expected.update(fill_states(keyed_backend, range(1, 1500, 40), base=3000))
        handle = self._checkpoint(keyed_backend, 2, snapshot_streams)
        self._assert_restores(state_backend, tmp_path, handle, snapshot_streams, "restored", expected,
                              "checkpoint 2 taken again after its abort")

    def test_rescale_from_an_incremental_chain(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        requires(state_backend, "incremental_snapshots")
        expected = fill_states(keyed_backend, range(2000))
        self._checkpoint(keyed_backend, 1, snapshot_streams)
        expected.update(fill_states(keyed_backend, range(0, 2000, 9), base=7000))
        handle = self._checkpoint(keyed_backend, 2, snapshot_streams)
        found: dict[str, Any] = {}
        for index in range(3):
            restored = self._restored(state_backend, tmp_path, handle, snapshot_streams, f"part-{index}",
                                      subtask_index=index, parallelism=3)
            try:
                part = read_states(restored)
                assert not part.keys() & found.keys(), "a key was restored by two subtasks"
                found.update(part)
            finally:
                restored.dispose()
        assert_same_state(found, expected, "state of 3 subtasks restored from an incremental chain")

    @pytest.mark.parametrize("seed", range(4))
    def test_random_changes_through_a_chain_match_a_model(self, state_backend, snapshot_streams, tmp_path, seed):
        """Random writes, clears and timers (``chain_model``) over checkpoints: some with no change,
        some aborted, some pending while a newer one is taken and written first, with a state
        registered after the first ones. The state restored from each checkpoint is the model's at
        its synchronous part."""
        requires(state_backend, "incremental_snapshots")
        rnd = random.Random(seed)
        params: dict[str, Any] = {"max_parallelism": chain_model.MAX_PARALLELISM,
                                  "key_serializer": chain_model.KEY_SERIALIZER}
        backend = open_keyed_backend(state_backend, str(tmp_path / "keyed"), **params)
        model: chain_model.Model = ({}, set())
        taken: list[tuple[int, Any, chain_model.Model, bool]] = []  # (checkpoint, pending, model, late)
        try:
            for checkpoint_id in range(1, 13):
                late = checkpoint_id > 3
                chain_model.change(backend, rnd, model, late, rnd.choice([0, 5, 50, 200]))
                taken.append((checkpoint_id, backend.snapshot(checkpoint_id, INCREMENTAL),
                              chain_model.copied(model), late))
                if rnd.random() < 0.3:
                    continue  # pending: the next checkpoint is written first
                written = []
                for cp, pending, expected, at_late in reversed(taken):  # changes before and after each write
                    chain_model.change(backend, rnd, model, late, rnd.choice([0, 30]))
                    written.append((cp, pending.write(snapshot_streams), expected, at_late))
                taken = []
                if rnd.random() < 0.1:
                    for cp, _, _, _ in written:
                        backend.notify_checkpoint_aborted(cp)
                    continue
                for cp, handle, expected, at_late in sorted(written, key=lambda w: w[0]):
                    backend.notify_checkpoint_complete(cp)
                    restored = open_keyed_backend(state_backend, str(tmp_path / f"r{cp}"),
                                                  restore_handles=[handle] if handle is not None else [],
                                                  restore_streams=snapshot_streams, **params)
                    try:
                        cells, timers = chain_model.read(restored, at_late)
                    finally:
                        restored.dispose()
                    assert cells == expected[0], f"seed {seed}: cells restored from checkpoint {cp}"
                    assert timers == expected[1], f"seed {seed}: timers restored from checkpoint {cp}"
        finally:
            for _, pending, _, _ in taken:
                pending.release()
            backend.dispose()
