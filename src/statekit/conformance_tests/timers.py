"""Timers level: timers are keyed state every backend keeps (``spi.timers``). Required of every
backend, no capability to declare: the queue's semantics (order, de-duplication, deletion,
namespaces, timers added while firing), snapshots (isolation, restore from full and incremental
snapshots and savepoints), rescaling (each key group's timers go with it), a backend switch (a
heap savepoint's timers fire in the backend under test, and its savepoint's in the heap), and
jobs on the local runner: event-time windows and processing-time timers against a plain-Python
oracle across restarts, a rescale 4 -> 3 -> 8, a backend switch through a savepoint with pending
timers, a replayed epoch that fires the same timers, and ``statekit.windows`` taking batches as it
takes rows.
"""
from __future__ import annotations

import random
from typing import Any

import pytest

from statekit.backends.common.key_layout import varint
from statekit.conformance_tests.base import BackendTestBase, open_keyed_backend, set_key
from statekit.conformance_tests.compare import assert_same_rows
from statekit.conformance_tests.snapshot_support import SNAPSHOT_MODES, snapshot_options_for
from statekit.conformance_tests.timer_workload import (
    WATERMARK_DELAY, WindowCountFunction, epoch_clock, make_timed_epochs, timer_oracle,
)
from statekit.runtime.event_time import WATERMARK
from statekit.runtime.local_runner import LocalRunner
from statekit.serializers import DEFAULT_SERIALIZER, Int64Serializer
from statekit.spi import KeyedStateBackend, StateBackend, key_group_for_key
from statekit.spi.backend import SnapshotOptions, SnapshotType
from statekit.spi.state import VOID_NAMESPACE
from statekit.spi.storage import CheckpointStorage, CheckpointStreams
from statekit.spi.timers import TimerQueue
from statekit.storage.inline import InlineStreams

EVENT_TIMERS = "_timers/conformance/event-time"
MAX_P = 128
NAMESPACES = Int64Serializer()

Planned = tuple[int, str, Any]  # (timestamp, key, namespace)


def firing_order(timers: set[Planned] | list[Planned], max_parallelism: int = MAX_P) -> list[Planned]:
    """The order every backend fires timers in: timestamp, key group, serialized key and namespace."""
    keys = DEFAULT_SERIALIZER

    def order(timer: Planned) -> tuple[int, int, bytes]:
        timestamp, key, namespace = timer
        key_bytes = keys.serialize(key)
        ns_bytes = b"" if namespace is VOID_NAMESPACE else NAMESPACES.serialize(namespace)
        return (timestamp, key_group_for_key(key, max_parallelism),
                varint(len(key_bytes)) + key_bytes + varint(len(ns_bytes)) + ns_bytes)

    return sorted(timers, key=order)


def register(backend: KeyedStateBackend, queue: TimerQueue, timers: list[Planned]) -> None:
    for timestamp, key, namespace in timers:
        set_key(backend, key)
        queue.add(timestamp, namespace)


def drain(queue: TimerQueue, up_to: int = 1 << 62) -> list[Planned]:
    fired = []
    while (timer := queue.poll(up_to)) is not None:
        fired.append((timer.timestamp, timer.key, timer.namespace))
    return fired


def snapshot_of(backend: KeyedStateBackend, streams: CheckpointStreams, checkpoint_id: int,
                options: SnapshotOptions = SnapshotOptions(), pending: Any = None) -> Any:
    """The handle of a snapshot of a backend that holds timers (a failure if the snapshot is empty)."""
    handle = (pending or backend.snapshot(checkpoint_id, options)).write(streams)
    if handle is None:
        raise AssertionError("the snapshot of a backend holding timers is empty: timers are keyed state, and "
                             "every snapshot must hold them")
    return handle


def plan(n: int, seed: int, n_keys: int = 200) -> list[Planned]:
    rng = random.Random(seed)
    return [(rng.randrange(-50, 2000), f"key-{rng.randrange(n_keys)}", rng.choice([VOID_NAMESPACE, 1, 2]))
            for _ in range(n)]


class TimerTests(BackendTestBase):
    """The timers level: override ``state_backend`` (and ``checkpoint_storage`` for the jobs)."""

    @pytest.fixture
    def snapshot_streams(self) -> CheckpointStreams:
        return InlineStreams()

    @pytest.fixture
    def checkpoint_storage(self) -> CheckpointStorage | None:
        """The storage the jobs checkpoint to; None = the ``jobmanager`` storage."""
        return None

    @staticmethod
    def queue(backend: KeyedStateBackend) -> TimerQueue:
        return backend.create_timer_queue(EVENT_TIMERS, NAMESPACES)

    # --- semantics
    def test_timers_fire_in_order_up_to_the_bound(self, keyed_backend):
        timers = plan(2000, seed=1)
        queue = self.queue(keyed_backend)
        register(keyed_backend, queue, timers)
        expected = firing_order(set(timers))
        assert queue.peek_timestamp() == expected[0][0], "peek_timestamp must be the earliest timestamp"
        early = drain(queue, 999)
        assert early == [t for t in expected if t[0] <= 999], \
            "poll(999) must return exactly the timers at or before 999, by timestamp, key group, key and namespace"
        assert queue.peek_timestamp() == next(t[0] for t in expected if t[0] > 999)
        assert drain(queue) == [t for t in expected if t[0] > 999], "the rest must follow in the same order"
        assert queue.poll(1 << 62) is None and queue.peek_timestamp() is None, "a drained queue must be empty"

    def test_a_timer_registered_twice_fires_once(self, keyed_backend):
        queue = self.queue(keyed_backend)
        register(keyed_backend, queue, [(5, "a", VOID_NAMESPACE)] * 3 + [(5, "a", 1), (5, "b", VOID_NAMESPACE)])
        assert drain(queue) == firing_order([(5, "a", VOID_NAMESPACE), (5, "a", 1), (5, "b", VOID_NAMESPACE)]), \
            "timers are unique per (key, namespace, timestamp)"

    def test_deleted_timers_do_not_fire(self, keyed_backend):
        timers = plan(500, seed=2)
        queue = self.queue(keyed_backend)
        register(keyed_backend, queue, timers)
        removed = set(timers[::3])
        for timestamp, key, namespace in removed:
            set_key(keyed_backend, key)
            queue.remove(timestamp, namespace)
            queue.remove(timestamp + 10 ** 6, namespace)  # absent: nothing happens
        assert drain(queue) == firing_order(set(timers) - removed)

    def test_adds_removes_and_polls_interleaved_fire_in_order(self, keyed_backend):
        """Many timers per key (a queue that reads ahead must keep what it read exact): rounds of
        registering, deleting and firing up to a moving bound, against the set of live timers."""
        rng = random.Random(7)
        queue = self.queue(keyed_backend)
        live: set[Planned] = set()
        bound = -100
        for round_number in range(12):
            added = plan(400, seed=100 + round_number, n_keys=6)
            register(keyed_backend, queue, [(t + bound + 50, key, ns) for t, key, ns in added])
            live |= {(t + bound + 50, key, ns) for t, key, ns in added}
            for timestamp, key, namespace in rng.sample(sorted(live, key=repr), len(live) // 4):
                set_key(keyed_backend, key)
                queue.remove(timestamp, namespace)
                live.discard((timestamp, key, namespace))
            bound += rng.randrange(50, 400)
            due = firing_order({t for t in live if t[0] <= bound})
            assert drain(queue, bound) == due, f"round {round_number}: the timers due at {bound} in order"
            live -= set(due)
        assert drain(queue) == firing_order(live)

    def test_deleting_the_earliest_timer_moves_the_head(self, keyed_backend):
        queue = self.queue(keyed_backend)
        register(keyed_backend, queue, [(1, "a", VOID_NAMESPACE), (2, "a", VOID_NAMESPACE), (3, "b", VOID_NAMESPACE)])
        set_key(keyed_backend, "a")
        queue.remove(1)
        assert queue.peek_timestamp() == 2, "after the earliest timer is deleted the next one is first"
        queue.remove(2)
        assert queue.poll(2) is None, "no timer is due at 2 once both are deleted"
        assert drain(queue) == [(3, "b", VOID_NAMESPACE)]

    def test_timers_registered_while_firing_fire_when_due(self, keyed_backend):
        queue = self.queue(keyed_backend)
        register(keyed_backend, queue, [(10, "a", VOID_NAMESPACE), (20, "b", VOID_NAMESPACE)])
        first = queue.poll(100)
        assert first is not None and first.timestamp == 10
        set_key(keyed_backend, "c")
        queue.add(15)  # as on_timer may do: earlier than the next pending timer
        queue.add(500)  # not due
        assert drain(queue, 100) == [(15, "c", VOID_NAMESPACE), (20, "b", VOID_NAMESPACE)]
        assert queue.peek_timestamp() == 500

    def test_timer_services_are_apart(self, keyed_backend):
        one, other = self.queue(keyed_backend), keyed_backend.create_timer_queue("_timers/other/event-time")
        set_key(keyed_backend, "a")
        one.add(1)
        other.add(2)
        assert drain(one) == [(1, "a", VOID_NAMESPACE)] and drain(other) == [(2, "a", VOID_NAMESPACE)]

    def test_the_same_name_is_the_same_queue(self, keyed_backend):
        set_key(keyed_backend, "a")
        self.queue(keyed_backend).add(7)
        assert drain(self.queue(keyed_backend)) == [(7, "a", VOID_NAMESPACE)]

    def test_a_timestamp_that_is_not_a_64_bit_int_is_refused(self, keyed_backend):
        queue = self.queue(keyed_backend)
        set_key(keyed_backend, "a")
        queue.add(1)
        for bad, error in (("1", TypeError), (1.0, TypeError), (True, TypeError), (None, TypeError),
                           (1 << 63, ValueError)):
            with pytest.raises(error, match="timestamp"):
                queue.add(bad)
            with pytest.raises(error, match="timestamp"):  # as on every backend, not a silent no-op or a match
                queue.remove(bad)
        assert drain(queue) == [(1, "a", VOID_NAMESPACE)], "a refused timestamp changes no timer"

    # --- snapshots
    def test_a_snapshot_holds_the_timers_of_its_synchronous_part(self, state_backend, keyed_backend,
                                                               snapshot_streams, tmp_path):
        timers = plan(800, seed=3)
        queue = self.queue(keyed_backend)
        register(keyed_backend, queue, timers)
        pending = keyed_backend.snapshot(1)
        fired = drain(queue, 500)  # after the synchronous part: not in the snapshot's view
        register(keyed_backend, queue, [(7, "late", VOID_NAMESPACE)])
        handle = snapshot_of(keyed_backend, snapshot_streams, 1, pending=pending)
        assert fired, "the plan has timers at or before 500"
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            assert drain(self.queue(restored)) == firing_order(set(timers)), \
                "a snapshot must hold the timers as of its synchronous part: none fired since, none added since"
        finally:
            restored.dispose()

    @pytest.mark.parametrize("snapshot_type", [SnapshotType.CHECKPOINT, SnapshotType.SAVEPOINT],
                             ids=lambda t: t.value)
    def test_timers_restore_from_a_full_snapshot(self, state_backend, keyed_backend, snapshot_streams, tmp_path,
                                                 snapshot_type):
        timers = plan(1000, seed=4)
        register(keyed_backend, self.queue(keyed_backend), timers)
        handle = snapshot_of(keyed_backend, snapshot_streams, 1, SnapshotOptions(snapshot_type))
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            assert drain(self.queue(restored)) == firing_order(set(timers))
        finally:
            restored.dispose()

    def test_timers_restore_from_an_incremental_chain(self, state_backend, keyed_backend, snapshot_streams,
                                                      tmp_path):
        options = snapshot_options_for("incremental", state_backend)
        queue = self.queue(keyed_backend)
        expected: set[Planned] = set()
        handle = None
        for checkpoint_id in range(1, 5):
            added = plan(300, seed=10 + checkpoint_id)
            register(keyed_backend, queue, added)
            expected |= set(added)
            fired = drain(queue, 100 * checkpoint_id)  # each delta also removes timers
            expected -= set(fired)
            for timestamp, key, namespace in sorted(expected, key=repr)[::7]:
                set_key(keyed_backend, key)
                queue.remove(timestamp, namespace)
                expected.discard((timestamp, key, namespace))
            handle = snapshot_of(keyed_backend, snapshot_streams, checkpoint_id, options)
            keyed_backend.notify_checkpoint_complete(checkpoint_id)
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            assert drain(self.queue(restored)) == firing_order(expected), \
                "the timers restored from an incremental chain differ from those registered"
        finally:
            restored.dispose()

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_timers_go_with_their_key_groups_on_rescale(self, state_backend, keyed_backend, snapshot_streams,
                                                        tmp_path, mode):
        timers = set(plan(1500, seed=5, n_keys=400))
        register(keyed_backend, self.queue(keyed_backend), list(timers))
        handle = snapshot_of(keyed_backend, snapshot_streams, 1, snapshot_options_for(mode, state_backend))
        found: list[Planned] = []
        for index in range(3):
            part = open_keyed_backend(state_backend, str(tmp_path / f"part-{index}"), subtask_index=index,
                                      parallelism=3, restore_handles=[handle], restore_streams=snapshot_streams)
            try:
                own = drain(self.queue(part))
                kgs = part.key_group_range
                strays = [t for t in own if key_group_for_key(t[1], MAX_P) not in kgs]
                assert not strays, f"subtask {index} of 3 fired timers of other key groups, e.g. {strays[:3]}"
                assert own == firing_order([t for t in timers if key_group_for_key(t[1], MAX_P) in kgs]), \
                    f"subtask {index} of 3 must fire exactly its key groups' timers, in order"
                found.extend(own)
            finally:
                part.dispose()
        assert sorted(found, key=repr) == sorted(timers, key=repr)

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_timers_of_several_subtasks_merge_on_rescale(self, state_backend, snapshot_streams, tmp_path, mode):
        """3 -> 2: each new subtask restores key groups of two old ones, timers among them (backends
        that restore one handle as their base and copy in the others' key groups must copy the timer
        tables too)."""
        timers = set(plan(1500, seed=10, n_keys=400))
        handles = []
        for index in range(3):
            old = open_keyed_backend(state_backend, str(tmp_path / f"old-{index}"), subtask_index=index,
                                     parallelism=3)
            try:
                register(old, self.queue(old),
                         [t for t in timers if key_group_for_key(t[1], MAX_P) in old.key_group_range])
                handles.append(snapshot_of(old, snapshot_streams, 1, snapshot_options_for(mode, state_backend)))
            finally:
                old.dispose()
        for index in range(2):
            new = open_keyed_backend(state_backend, str(tmp_path / f"new-{index}"), subtask_index=index,
                                     parallelism=2, restore_handles=handles, restore_streams=snapshot_streams)
            try:
                kgs = new.key_group_range
                assert drain(self.queue(new)) == firing_order(
                    [t for t in timers if key_group_for_key(t[1], MAX_P) in kgs]), \
                    f"subtask {index} of 2 must fire exactly the timers of its key groups, from both old subtasks"
            finally:
                new.dispose()

    def test_heap_savepoint_timers_fire_in_this_backend_and_back(self, state_backend, snapshot_streams, tmp_path):
        from statekit.backends.heap import HeapStateBackend

        timers = set(plan(600, seed=6))
        savepoint = SnapshotOptions(SnapshotType.SAVEPOINT)
        heap = open_keyed_backend(HeapStateBackend(), str(tmp_path / "heap"))
        try:
            register(heap, self.queue(heap), list(timers))
            handle = snapshot_of(heap, snapshot_streams, 1, savepoint)
        finally:
            heap.dispose()
        switched = open_keyed_backend(state_backend, str(tmp_path / "switched"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            queue = self.queue(switched)
            first = drain(queue, 300)
            assert first == firing_order([t for t in timers if t[0] <= 300]), \
                "a heap savepoint's timers must fire in this backend in the same order"
            back = snapshot_of(switched, snapshot_streams, 2, savepoint)
        finally:
            switched.dispose()
        heap = open_keyed_backend(HeapStateBackend(), str(tmp_path / "heap-again"), restore_handles=[back],
                                  restore_streams=snapshot_streams)
        try:
            assert drain(self.queue(heap)) == firing_order([t for t in timers if t[0] > 300]), \
                "this backend's savepoint must hold the timers that did not fire, for the heap backend"
        finally:
            heap.dispose()

    # --- jobs on the local runner
    def _runner(self, state_backend: StateBackend, storage: CheckpointStorage | None, tmp_path: Any, job: str,
                parallelism: int, clock: Any) -> LocalRunner:
        return LocalRunner(WindowCountFunction(), lambda row: row[0], parallelism=parallelism, max_parallelism=MAX_P,
                           state_backend=state_backend, storage=storage, local_dir=str(tmp_path / "local"),
                           job_id=job, clock=clock, event_time=lambda row: row[1], watermark_delay=WATERMARK_DELAY)

    def test_a_timer_job_matches_its_oracle_across_rescales(self, state_backend, checkpoint_storage, tmp_path):
        epochs = make_timed_epochs(12, 300, 60, seed=7) + [[], []]
        expected = timer_oracle(epochs)
        clock = epoch_clock()
        runner = self._runner(state_backend, checkpoint_storage, tmp_path, "timers-rescale", 4, clock)
        for number, rows in enumerate(epochs):
            if number in (4, 8):
                runner.rescale({4: 3, 8: 8}[number])
            assert_same_rows(runner.run_epoch(rows), expected[number], f"epoch {number + 1} output "
                             f"(parallelism {runner.parallelism})")
        assert any(out and out[0] == "window" for epoch in expected for out in epoch)
        assert any(out and out[0] == "idle" for epoch in expected for out in epoch)

    @pytest.mark.parametrize("assigner", ["tumbling", "sliding", "session"])
    def test_the_window_operator_takes_batches_as_it_takes_rows(self, state_backend, checkpoint_storage, tmp_path,
                                                               assigner):
        """``statekit.windows`` over this backend on both of its paths, batches aggregated with Arrow
        and row by row: the same windows and the same late rows, epoch by epoch, across a rescale."""
        from statekit import windows  # noqa: PLC0415 - the windows library is optional for plain backends

        made = {"tumbling": lambda: windows.TumblingWindows.of("1 s"),
                "sliding": lambda: windows.SlidingWindows.of("2 s", "500 ms"),
                "session": lambda: windows.SessionWindows.with_gap("400 ms")}[assigner]
        epochs = [[{"k": key, "ts": ts, "v": ts % 7} for key, ts in rows]
                  for rows in make_timed_epochs(8, 300, 60, seed=10)] + [[]]
        found = []
        for vectorized in (True, False):
            function = windows.aggregate(made(), windows.Sum(), timestamp="ts", value="v",
                                         allowed_lateness="500 ms", vectorized=vectorized)
            runner = LocalRunner(function, lambda row: row["k"], parallelism=2, max_parallelism=MAX_P,
                                 state_backend=state_backend, storage=checkpoint_storage,
                                 local_dir=str(tmp_path / f"local-{vectorized}"), job_id=f"windows-{vectorized}",
                                 event_time="ts", watermark_delay=WATERMARK_DELAY, late_rows="side_output")
            outputs = []
            for number, rows in enumerate(epochs):
                if number == 4:
                    runner.rescale(3)
                outputs.append((runner.run_epoch(rows), sorted(map(repr, runner.late_output))))
            found.append(outputs)
        for number, ((batched, late), (by_row, late_by_row)) in enumerate(zip(*found)):
            assert_same_rows(batched, by_row, f"epoch {number + 1}: the windows of the batch path against the "
                                              f"per-row path")
            assert late == late_by_row, f"epoch {number + 1}: the late rows of both paths"
        assert sum(len(out) for out, _ in found[0]) > 100

    def test_pending_timers_survive_a_backend_switch_through_a_savepoint(self, state_backend, tmp_path):
        from statekit.backends.heap import HeapStateBackend

        epochs = make_timed_epochs(8, 200, 40, seed=8)
        expected = timer_oracle(epochs)
        clock = epoch_clock()
        heap = self._runner(HeapStateBackend(), None, tmp_path / "heap", "timers-switch", 2, clock)
        for number in range(4):
            assert_same_rows(heap.run_epoch(epochs[number]), expected[number], f"heap epoch {number + 1}")
        savepoint = heap.savepoint()
        assert savepoint.properties.get(WATERMARK) is not None, "a savepoint keeps the watermark"
        switched = self._runner(state_backend, None, tmp_path / "switched", "timers-switched", 3, clock)
        switched.restore_from(savepoint, heap.streams)
        for number in range(4, 8):
            assert_same_rows(switched.run_epoch(epochs[number]), expected[number],
                             f"epoch {number + 1} after the switch from heap")

    def test_a_replayed_epoch_fires_the_same_timers(self, state_backend, checkpoint_storage, tmp_path):
        epochs = make_timed_epochs(6, 200, 30, seed=9)
        times = [1_700_000_000_000 + 30_000 * n for n in range(6)]
        clock_values = iter(times[:5] + [times[4]])  # the replay runs at the time recorded for it
        runner = self._runner(state_backend, checkpoint_storage, tmp_path, "timers-replay", 2,
                              lambda: next(clock_values))
        for number in range(5):
            first = runner.run_epoch(epochs[number])
        state_before = runner.latest_metadata()
        replayed = runner.run_epoch(epochs[4], checkpoint_id=5)
        assert sorted(replayed, key=repr) == sorted(first, key=repr), \
            "epoch 5 run again from checkpoint 4 must fire the same timers with the same output"
        assert runner.latest_metadata().properties[WATERMARK] == state_before.properties[WATERMARK], \
            "the replayed epoch must have the watermark recorded the first time"


__all__ = ["TimerTests", "firing_order"]
