"""TTL level of the conformance suite, for backends that declare the ``ttl`` capability; modelled on
the categories of Flink's ``TtlStateTestBase``: expiry of each state kind (a value, each list
element, each map entry, a reducing or aggregating accumulator), the two update types, the two
visibilities, namespaces, cleanup in full snapshots, the sweep, timestamps kept across a restore,
a rescale and a backend switch, and TTL that is turned on or off for checkpointed state.

Time is the backend's processing time, set by the test (``set_processing_time``), as the runtime
sets it once per epoch. Every test skips for a backend that does not declare ``ttl``; the
semantics level checks that such a backend refuses TTL descriptors instead.

``EventTimeTtlTests``, for backends that declare ``event_time_ttl``: entries written at the
element's event time (``set_element_time``, never before the watermark) and expired by the
watermark (``set_watermark``), whatever the processing time does; sweeps, full snapshots and
restores on the watermark; a state's time kept in its snapshot (absent: processing time) and a
change of it refused.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import pytest

from statekit.conformance_tests.base import BackendTestBase, open_keyed_backend, requires, set_key
from statekit.conformance_tests.expect import expect_error
from statekit.conformance_tests.semantics.common import Average
from statekit.spi import (
    AggregatingStateDescriptor, IncompatibleSerializerError, KeyedStateBackend, ListStateDescriptor,
    MapStateDescriptor, ReducingStateDescriptor, StateAccessError, StateBackend, StateDescriptor, StateTtlConfig,
    TtlStateVisibility, TtlTimeCharacteristic, TtlUpdateType, ValueStateDescriptor,
)
from statekit.spi.backend import SnapshotOptions, SnapshotType
from statekit.spi.storage import CheckpointStreams
from statekit.spi.timers import MAX_TIMESTAMP
from statekit.storage.inline import InlineStreams

TTL_SECONDS = 10.0
TTL = int(TTL_SECONDS * 1000)
T0 = 1_700_000_000_000  # a processing time in epoch milliseconds


def _config(update: TtlUpdateType = TtlUpdateType.ON_CREATE_AND_WRITE,
            visibility: TtlStateVisibility = TtlStateVisibility.NEVER_RETURN_EXPIRED) -> StateTtlConfig:
    return StateTtlConfig(TTL_SECONDS, update, visibility)


class Kind:
    """One state kind seen the same way by every test: ``write(state, n)`` stores something built
    from ``n``; ``read(state)`` returns what is visible (``empty`` when nothing is)."""

    def __init__(self, name: str, descriptor: Callable[[StateTtlConfig | None], StateDescriptor],
                 write: Callable[[Any, int], None], read: Callable[[Any], Any], empty: Any) -> None:
        self.name, self.descriptor, self.write, self.read, self.empty = name, descriptor, write, read, empty

    def __repr__(self) -> str:
        return self.name


KINDS = [
    Kind("value", lambda ttl: ValueStateDescriptor("ttl-value", ttl=ttl),
         lambda s, n: s.update({"n": n}), lambda s: s.value(), None),
    Kind("list", lambda ttl: ListStateDescriptor("ttl-list", ttl=ttl),
         lambda s, n: s.add(n), lambda s: s.get(), []),
    Kind("map", lambda ttl: MapStateDescriptor("ttl-map", ttl=ttl),
         lambda s, n: s.put("entry", n), lambda s: dict(s.items()), {}),
    Kind("reducing", lambda ttl: ReducingStateDescriptor("ttl-reducing", reduce_function=operator.add, ttl=ttl),
         lambda s, n: s.add(n), lambda s: s.get(), None),
    Kind("aggregating", lambda ttl: AggregatingStateDescriptor("ttl-aggregating", aggregate_function=Average(),
                                                               ttl=ttl),
         lambda s, n: s.add(n), lambda s: s.get(), None),
]


def at(backend: KeyedStateBackend, timestamp: int, key: Any = "k") -> None:
    backend.set_processing_time(timestamp)
    set_key(backend, key)


class TtlTests(BackendTestBase):
    """The TTL level: override ``state_backend``."""

    @pytest.fixture(autouse=True)
    def _requires_ttl(self, state_backend: StateBackend) -> None:
        requires(state_backend, "ttl")

    @pytest.fixture
    def snapshot_streams(self) -> CheckpointStreams:
        """Where snapshots are written and read; inline bytes by default."""
        return InlineStreams()

    # --- expiry per kind
    @pytest.mark.parametrize("kind", KINDS, ids=repr)
    def test_an_entry_is_visible_until_its_ttl_has_passed(self, keyed_backend, kind):
        state = keyed_backend.get_state(kind.descriptor(_config()))
        at(keyed_backend, T0)
        kind.write(state, 1)
        written = kind.read(state)
        at(keyed_backend, T0 + TTL - 1)
        assert kind.read(state) == written, f"{kind}: an entry written at t disappeared before t + ttl"
        at(keyed_backend, T0 + TTL)
        assert kind.read(state) == kind.empty, \
            f"{kind}: an entry written at t is still visible at t + ttl (NeverReturnExpired): {kind.read(state)!r}"
        kind.write(state, 2)
        assert kind.read(state) not in (kind.empty, written), f"{kind}: a write after expiry is not visible"

    def test_list_elements_expire_one_by_one(self, keyed_backend):
        state = keyed_backend.get_state(ListStateDescriptor("elements", ttl=_config()))
        at(keyed_backend, T0)
        state.add("old")
        at(keyed_backend, T0 + TTL // 2)
        state.add_all(["new-1", "new-2"])
        at(keyed_backend, T0 + TTL)
        assert state.get() == ["new-1", "new-2"], f"list elements expire per element: {state.get()}"
        at(keyed_backend, T0 + TTL // 2 + TTL)
        assert state.get() == [], f"every element expired, the list is {state.get()}"

    def test_map_entries_expire_one_by_one(self, keyed_backend):
        state = keyed_backend.get_state(MapStateDescriptor("entries", ttl=_config()))
        at(keyed_backend, T0)
        state.put("old", 1)
        at(keyed_backend, T0 + TTL // 2)
        state.put_all({"new": 2, "other": 3})
        at(keyed_backend, T0 + TTL)
        assert state.get("old") is None and not state.contains("old"), "an expired map entry is visible"
        assert dict(state.items()) == {"new": 2, "other": 3}, f"map entries expire per entry: {dict(state.items())}"
        assert sorted(state.keys()) == ["new", "other"] and not state.is_empty()
        at(keyed_backend, T0 + TTL // 2 + TTL)
        assert state.is_empty() and dict(state.items()) == {}, f"every entry expired: {dict(state.items())}"

    def test_an_aggregate_starts_again_after_expiry(self, keyed_backend):
        reducing = keyed_backend.get_state(ReducingStateDescriptor("sum", reduce_function=operator.add,
                                                                   ttl=_config()))
        average = keyed_backend.get_state(AggregatingStateDescriptor("avg", aggregate_function=Average(),
                                                                     ttl=_config()))
        at(keyed_backend, T0)
        reducing.add(10)
        average.add(10)
        at(keyed_backend, T0 + TTL // 2)
        reducing.add(5)  # a write: the accumulator's ttl starts again
        average.add(20)
        at(keyed_backend, T0 + TTL)
        assert (reducing.get(), average.get()) == (15, 15.0), "an accumulator written at t/2 expired at t"
        at(keyed_backend, T0 + 3 * TTL)
        reducing.add(1)
        average.add(1)
        assert (reducing.get(), average.get()) == (1, 1.0), \
            f"after expiry an accumulator must start from the new value: {(reducing.get(), average.get())}"

    def test_ttl_is_per_key_and_namespace(self, keyed_backend):
        state = keyed_backend.get_state(ValueStateDescriptor("scoped", ttl=_config()))
        at(keyed_backend, T0, "a")
        state.update("a-void")
        state.set_current_namespace("window-1")
        state.update("a-w1")
        at(keyed_backend, T0 + TTL // 2, "b")
        state.set_current_namespace(None)
        state.update("b-void")
        at(keyed_backend, T0 + TTL, "a")
        state.set_current_namespace("window-1")
        assert state.value() is None, "key a's entry in window-1 outlived its ttl"
        set_key(keyed_backend, "b")
        state.set_current_namespace(None)
        assert state.value() == "b-void", "key b's entry expired with key a's"

    # --- update types and visibility
    @pytest.mark.parametrize("kind", KINDS, ids=repr)
    def test_on_create_and_write_a_read_does_not_extend(self, keyed_backend, kind):
        state = keyed_backend.get_state(kind.descriptor(_config(TtlUpdateType.ON_CREATE_AND_WRITE)))
        at(keyed_backend, T0)
        kind.write(state, 1)
        at(keyed_backend, T0 + TTL - 1)
        kind.read(state)
        at(keyed_backend, T0 + TTL)
        assert kind.read(state) == kind.empty, f"{kind}: with OnCreateAndWrite, a read extended the ttl"

    @pytest.mark.parametrize("kind", KINDS, ids=repr)
    def test_on_read_and_write_a_read_extends(self, keyed_backend, kind):
        state = keyed_backend.get_state(kind.descriptor(_config(TtlUpdateType.ON_READ_AND_WRITE)))
        at(keyed_backend, T0)
        kind.write(state, 1)
        written = kind.read(state)
        at(keyed_backend, T0 + TTL - 1)
        assert kind.read(state) == written
        at(keyed_backend, T0 + 2 * TTL - 2)
        assert kind.read(state) == written, f"{kind}: with OnReadAndWrite, a read at t + ttl - 1 did not extend it"
        at(keyed_backend, T0 + 3 * TTL)
        assert kind.read(state) == kind.empty, f"{kind}: the entry never expired"

    @pytest.mark.parametrize("kind", KINDS, ids=repr)
    def test_return_expired_if_not_cleaned_up(self, keyed_backend, kind):
        state = keyed_backend.get_state(kind.descriptor(_config(
            visibility=TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)))
        at(keyed_backend, T0)
        kind.write(state, 1)
        written = kind.read(state)
        at(keyed_backend, T0 + TTL)
        assert kind.read(state) == written, f"{kind}: an expired entry not yet cleaned up must still be returned"
        assert kind.read(state) == kind.empty, f"{kind}: reading an expired entry must clean it up"

    # --- cleanup
    def test_expired_entries_are_left_out_of_full_snapshots(self, state_backend, keyed_backend, snapshot_streams,
                                                            tmp_path):
        self._write_generations(keyed_backend)
        keyed_backend.set_processing_time(T0 + TTL + 1)  # the first generation expired, the second not
        for snapshot_type in (SnapshotType.CHECKPOINT, SnapshotType.SAVEPOINT):
            handle = keyed_backend.snapshot(1, SnapshotOptions(snapshot_type)).write(snapshot_streams)
            restored = open_keyed_backend(state_backend, str(tmp_path / f"restored-{snapshot_type.value}"),
                                          restore_handles=[handle], restore_streams=snapshot_streams)
            try:
                restored.set_processing_time(T0)  # an earlier clock: whatever was written would be visible
                found = self._generations(restored)
                assert found == {"young": 50, "old": 0}, (
                    f"a full {snapshot_type.value} taken after the ttl of 'old' holds {found}: expired entries "
                    f"must be left out (Flink's cleanupFullSnapshot)")
            finally:
                restored.dispose()

    def test_a_sweep_removes_entries_nobody_reads(self, keyed_backend):
        self._write_generations(keyed_backend)
        keyed_backend.set_processing_time(T0 + TTL + 1)
        assert keyed_backend.sweep_expired(0) == 0, "sweep_expired(0) must not sweep (the sweep is switched off)"
        removed = 0
        for _ in range(100):  # each call may stop early; together they visit everything
            swept = keyed_backend.sweep_expired(10.0)
            removed += swept
            if not swept:
                break
        assert removed >= 50 * 4, f"sweep_expired removed {removed} entries, 50 keys x 4 kinds (200+) had expired"
        keyed_backend.set_processing_time(T0)
        assert self._generations(keyed_backend) == {"young": 50, "old": 0}, \
            "after a sweep the expired entries must be gone even for an earlier clock"
        assert sorted(keyed_backend.keys("gen-value")) == sorted(f"young-{i}" for i in range(50)), \
            "keys() still lists keys whose entries were swept"

    def test_sweeps_of_restored_backends_reach_every_key_group(self, state_backend, snapshot_streams, tmp_path):
        """Under Spark a subtask's backend is rarely kept from one epoch to the next: each epoch's is
        restored from the previous checkpoint (local state or storage). Each epoch here sweeps
        within a budget that covers one (state, key group) pair; together the sweeps must reach
        every pair, not start again at the first one in each restored backend."""
        descriptor = ValueStateDescriptor("swept", ttl=_config())
        keys = [f"key-{i}" for i in range(40)]

        def opened(epoch: int, handle: Any) -> KeyedStateBackend:
            return open_keyed_backend(state_backend, str(tmp_path / f"epoch-{epoch}"), max_parallelism=4,
                                      restore_handles=[handle] if handle is not None else [],
                                      restore_streams=snapshot_streams)

        handle = None  # after epoch 1: None when a full snapshot left every (expired) entry out
        for epoch in range(1, 41):
            backend = opened(epoch, handle)
            try:
                if epoch == 1:
                    state = backend.get_state(descriptor)
                    for key in keys:
                        at(backend, T0, key)
                        state.update(key)
                else:
                    backend.set_processing_time(T0 + TTL + 1000 * epoch)
                    backend.sweep_expired(1e-9)  # stops after the first (state, key group) pair it visits
                handle = backend.snapshot(epoch, SnapshotOptions(incremental=True)).write(snapshot_streams)
                backend.notify_checkpoint_complete(epoch)
            finally:
                backend.dispose()
        restored = opened(41, handle)
        try:
            state = restored.get_state(descriptor)
            at(restored, T0)  # an earlier clock: whatever was not swept is visible
            left = [key for key in keys if set_key(restored, key) or state.value() is not None]
            assert not left, (f"39 sweeps of restored backends, each visiting one of 4 key groups, left expired "
                              f"entries of keys {left}: a restored backend's sweep must not always start at the "
                              f"first key group")
        finally:
            restored.dispose()

    # --- timestamps survive restores
    def test_a_restore_keeps_the_write_times(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        self._write_generations(keyed_backend)
        keyed_backend.set_processing_time(T0 + 1)
        handle = keyed_backend.snapshot(1).write(snapshot_streams)
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            restored.set_processing_time(T0 + TTL // 2 + 1)
            assert self._generations(restored) == {"young": 50, "old": 50}
            restored.set_processing_time(T0 + TTL)
            assert self._generations(restored) == {"young": 50, "old": 0}, \
                "a restored entry expires at its original write time + ttl"
        finally:
            restored.dispose()

    def test_a_rescale_keeps_the_write_times(self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        self._write_generations(keyed_backend)
        handle = keyed_backend.snapshot(1).write(snapshot_streams)
        found = {"young": 0, "old": 0}
        for index in range(3):
            part = open_keyed_backend(state_backend, str(tmp_path / f"part-{index}"), subtask_index=index,
                                      parallelism=3, restore_handles=[handle], restore_streams=snapshot_streams)
            try:
                part.set_processing_time(T0 + TTL)
                for generation, count in self._generations(part, owned_only=True).items():
                    found[generation] += count
            finally:
                part.dispose()
        assert found == {"young": 50, "old": 0}, f"after a rescale 1->3 the live entries are {found}"

    def test_heap_snapshots_restore_with_their_write_times(self, keyed_backend, snapshot_streams, tmp_path,
                                                          state_backend):
        """A backend switch: timestamps are part of the canonical format."""
        from statekit.backends.heap import HeapStateBackend

        heap = open_keyed_backend(HeapStateBackend(), str(tmp_path / "heap"))
        try:
            self._write_generations(heap)
            handle = heap.snapshot(1, SnapshotOptions(SnapshotType.SAVEPOINT)).write(snapshot_streams)
        finally:
            heap.dispose()
        restored = open_keyed_backend(state_backend, str(tmp_path / "switched"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            restored.set_processing_time(T0 + TTL)
            assert self._generations(restored) == {"young": 50, "old": 0}
        finally:
            restored.dispose()

    # --- turning TTL on or off: the restored state is migrated
    def _switched(self, state_backend: StateBackend, keyed_backend: KeyedStateBackend,
                  snapshot_streams: CheckpointStreams, tmp_path: Any, before: StateTtlConfig | None,
                  after: StateTtlConfig | None, restore_at: int) -> KeyedStateBackend:
        """Keys ``old`` (written at T0) and ``young`` (at T0 + TTL - 1) in a value, a list and a map
        state with TTL ``before``, restored at ``restore_at`` and registered with TTL ``after``."""
        for key, written in (("old", T0), ("young", T0 + TTL - 1)):
            at(keyed_backend, written, key)
            keyed_backend.get_state(ValueStateDescriptor("value", ttl=before)).update(key)
            keyed_backend.get_state(ListStateDescriptor("list", ttl=before)).add_all([key, key])
            keyed_backend.get_state(MapStateDescriptor("map", ttl=before)).put("entry", key)
        handle = keyed_backend.snapshot(1).write(snapshot_streams)
        restored = open_keyed_backend(state_backend, str(tmp_path / "switched"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        restored.set_processing_time(restore_at)
        for descriptor in (ValueStateDescriptor("value", ttl=after), ListStateDescriptor("list", ttl=after),
                           MapStateDescriptor("map", ttl=after)):
            restored.get_state(descriptor)
        return restored

    def _held(self, backend: KeyedStateBackend, after: StateTtlConfig | None) -> dict[str, Any]:
        found = {}
        for key in ("old", "young"):
            set_key(backend, key)
            found[key] = (backend.get_state(ValueStateDescriptor("value", ttl=after)).value(),
                          list(backend.get_state(ListStateDescriptor("list", ttl=after)).get() or []),
                          dict(backend.get_state(MapStateDescriptor("map", ttl=after)).items()))
        return found

    def test_turning_ttl_on_migrates_entries_to_live_a_full_ttl_from_the_restore(
            self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        restore_at = T0 + 5 * TTL
        restored = self._switched(state_backend, keyed_backend, snapshot_streams, tmp_path, None, _config(),
                                  restore_at)
        try:
            alive = {key: (key, [key, key], {"entry": key}) for key in ("old", "young")}
            restored.set_processing_time(restore_at + TTL - 1)
            assert self._held(restored, _config()) == alive, \
                "entries of a state that gets TTL are written at the restore, and live a full TTL from then"
            restored.set_processing_time(restore_at + TTL)
            assert self._held(restored, _config()) == {key: (None, [], {}) for key in ("old", "young")}, \
                "entries of a state that got TTL expire a full TTL after the restore"
        finally:
            restored.dispose()

    def test_turning_ttl_off_drops_expired_entries_and_keeps_the_others_for_good(
            self, state_backend, keyed_backend, snapshot_streams, tmp_path):
        restored = self._switched(state_backend, keyed_backend, snapshot_streams, tmp_path, _config(), None,
                                  T0 + TTL)
        try:
            expected = {"old": (None, [], {}), "young": ("young", ["young", "young"], {"entry": "young"})}
            assert self._held(restored, None) == expected, \
                "turning TTL off drops the entries expired at the restore and keeps the others"
            restored.set_processing_time(T0 + 100 * TTL)
            assert self._held(restored, None) == expected, "entries of a state without TTL never expire"
            again = restored.snapshot(2).write(snapshot_streams)
        finally:
            restored.dispose()
        reopened = open_keyed_backend(state_backend, str(tmp_path / "reopened"), restore_handles=[again],
                                      restore_streams=snapshot_streams)
        try:
            assert self._held(reopened, None) == expected, "the migrated state's snapshot holds it without TTL"
        finally:
            reopened.dispose()

    @pytest.mark.parametrize("before, after", [(None, _config()), (_config(), None)], ids=["enable", "disable"])
    def test_registering_a_state_again_with_ttl_turned_on_or_off_names_ttl(self, keyed_backend, before, after):
        """In the same run: the error says that TTL differs (it said 'other serializers', naming
        the internal TtlSerializer)."""
        keyed_backend.get_state(ValueStateDescriptor("switched", ttl=before))
        with expect_error(StateAccessError, "registering a state again with TTL turned "
                          f"{'on' if after else 'off'} must be refused") as caught:
            keyed_backend.get_state(ValueStateDescriptor("switched", ttl=after))
        assert "TTL" in str(caught.value) and "TtlSerializer" not in str(caught.value), \
            f"the error does not say that TTL changed: {caught.value}"

    # --- helpers
    GENERATIONS = {"old": T0, "young": T0 + TTL // 2}

    def _states(self, backend: KeyedStateBackend) -> dict[str, Any]:
        ttl = _config()
        return {
            "value": backend.get_state(ValueStateDescriptor("gen-value", ttl=ttl)),
            "list": backend.get_state(ListStateDescriptor("gen-list", ttl=ttl)),
            "map": backend.get_state(MapStateDescriptor("gen-map", ttl=ttl)),
            "reducing": backend.get_state(ReducingStateDescriptor("gen-reducing", reduce_function=operator.add,
                                                                  ttl=ttl)),
        }

    def _write_generations(self, backend: KeyedStateBackend) -> None:
        """50 keys written at T0 ('old'), 50 at T0 + ttl/2 ('young'), in four state kinds."""
        states = self._states(backend)
        for generation, timestamp in self.GENERATIONS.items():
            for i in range(50):
                at(backend, timestamp, f"{generation}-{i}")
                states["value"].update(i)
                states["list"].add_all([i, i + 1])
                states["map"].put("m", i)
                states["reducing"].add(i)

    def _generations(self, backend: KeyedStateBackend, owned_only: bool = False) -> dict[str, int]:
        """How many keys of each generation hold visible entries in all four kinds (a key with
        some kinds visible and others not fails the test)."""
        from statekit.spi.key_groups import key_group_for_key

        states = self._states(backend)
        found = {"young": 0, "old": 0}
        for generation in self.GENERATIONS:
            for i in range(50):
                key = f"{generation}-{i}"
                if owned_only and key_group_for_key(key, backend.max_parallelism) not in backend.key_group_range:
                    continue
                set_key(backend, key)
                visible = {"value": states["value"].value() is not None, "list": bool(states["list"].get()),
                           "map": states["map"].get("m") is not None, "reducing": states["reducing"].get() is not None}
                if len(set(visible.values())) != 1:
                    raise AssertionError(f"key {key}: entries written together expire together, but {visible}")
                found[generation] += visible["value"]
        return found


EVENT_TTL = StateTtlConfig(TTL_SECONDS, time_characteristic=TtlTimeCharacteristic.EVENT_TIME)
PROCESSING_TTL = StateTtlConfig(TTL_SECONDS)


def at_event(backend: KeyedStateBackend, watermark: int, element: int | None, key: Any = "k") -> None:
    """The watermark, and the event time of the element processed now (None: none)."""
    backend.set_watermark(watermark)
    backend.set_element_time(element)
    set_key(backend, key)


class EventTimeTtlTests(BackendTestBase):
    """The TTL level's event-time part: override ``state_backend``."""

    @pytest.fixture(autouse=True)
    def _requires_event_time_ttl(self, state_backend: StateBackend) -> None:
        requires(state_backend, "event_time_ttl")

    @pytest.fixture
    def snapshot_streams(self) -> CheckpointStreams:
        return InlineStreams()

    # --- expiry by the watermark, from the element's event time
    @pytest.mark.parametrize("kind", KINDS, ids=repr)
    def test_an_entry_expires_when_the_watermark_passes_its_event_time_plus_ttl(self, keyed_backend, kind):
        state = keyed_backend.get_state(kind.descriptor(EVENT_TTL))
        keyed_backend.set_processing_time(T0)
        at_event(keyed_backend, T0 - 5 * TTL, T0)  # a watermark far behind the element's event time
        kind.write(state, 1)
        written = kind.read(state)
        at_event(keyed_backend, T0 + TTL - 1, None)
        assert kind.read(state) == written, f"{kind}: an entry of event time t disappeared before watermark t + ttl"
        at_event(keyed_backend, T0 + TTL, None)
        assert kind.read(state) == kind.empty, (
            f"{kind}: an entry written by an element of event time t is visible at watermark t + ttl: "
            f"{kind.read(state)!r}")

    @pytest.mark.parametrize("kind", KINDS, ids=repr)
    def test_processing_time_does_not_expire_event_time_entries(self, keyed_backend, kind):
        state = keyed_backend.get_state(kind.descriptor(EVENT_TTL))
        keyed_backend.set_processing_time(T0)
        at_event(keyed_backend, T0, T0 + 1)
        kind.write(state, 1)
        written = kind.read(state)
        keyed_backend.set_processing_time(T0 + 1000 * TTL)
        assert kind.read(state) == written, \
            f"{kind}: an event-time TTL entry expired while the watermark stood still and processing time moved"
        assert keyed_backend.sweep_expired(10.0) == 0, "a sweep removed event-time entries the watermark keeps"

    def test_the_watermark_does_not_expire_processing_time_entries(self, keyed_backend):
        processing = keyed_backend.get_state(ValueStateDescriptor("by-processing-time", ttl=PROCESSING_TTL))
        event = keyed_backend.get_state(ValueStateDescriptor("by-event-time", ttl=EVENT_TTL))
        keyed_backend.set_processing_time(T0)
        at_event(keyed_backend, T0, T0 + 1)
        processing.update("p")
        event.update("e")
        at_event(keyed_backend, T0 + 1000 * TTL, None)
        assert (processing.value(), event.value()) == ("p", None), \
            "the watermark must expire event-time entries only, processing time the others"

    def test_the_write_time_is_never_before_the_watermark(self, keyed_backend):
        """Without an element time (a timer, or a runtime that knows none) and for a late element,
        an entry is written at the watermark: it lives a full TTL from now on, not expired at once."""
        state = keyed_backend.get_state(ValueStateDescriptor("stamped", ttl=EVENT_TTL))
        for key, element in (("no-element-time", None), ("late", T0 - 3 * TTL)):
            at_event(keyed_backend, T0, element, key)
            state.update(key)
        for key in ("no-element-time", "late"):
            at_event(keyed_backend, T0 + TTL - 1, None, key)
            assert state.value() == key, f"{key}: an entry written at watermark w expired before w + ttl"
            at_event(keyed_backend, T0 + TTL, None, key)
            assert state.value() is None, f"{key}: an entry written at watermark w is visible at w + ttl"

    def test_on_read_and_write_refreshes_with_the_element_time(self, keyed_backend):
        state = keyed_backend.get_state(ValueStateDescriptor("refreshed", ttl=StateTtlConfig(
            TTL_SECONDS, TtlUpdateType.ON_READ_AND_WRITE, time_characteristic=TtlTimeCharacteristic.EVENT_TIME)))
        at_event(keyed_backend, T0, T0 + 1)
        state.update("v")
        at_event(keyed_backend, T0 + TTL // 2, T0 + TTL)  # read by an element of a later event time
        assert state.value() == "v"
        at_event(keyed_backend, T0 + 2 * TTL - 1, None)
        assert state.value() == "v", "a read refreshes an event-time entry to the reading element's event time"
        at_event(keyed_backend, T0 + 3 * TTL, None)
        assert state.value() is None

    def test_the_end_of_input_expires_every_entry(self, keyed_backend):
        """The watermark of an ended input is the largest timestamp: every entry is expired, those
        written at that watermark (by the last timers) too."""
        state = keyed_backend.get_state(ValueStateDescriptor("final", ttl=EVENT_TTL))
        at_event(keyed_backend, T0, T0 + 1, "early")
        state.update("early")
        at_event(keyed_backend, MAX_TIMESTAMP, None, "at-the-end")
        state.update("at-the-end")
        for key in ("early", "at-the-end"):
            set_key(keyed_backend, key)
            assert state.value() is None, f"{key}: an entry is visible at the largest watermark"

    # --- sweeps, snapshots and restores on the watermark
    def test_a_sweep_removes_entries_the_watermark_expired(self, keyed_backend):
        self._write_generations(keyed_backend)
        keyed_backend.set_processing_time(T0 + 1000 * TTL)
        assert _sweep_all(keyed_backend) == 0, "a sweep removed event-time entries by processing time"
        keyed_backend.set_watermark(T0 + TTL + 1)
        assert _sweep_all(keyed_backend) >= 50 * 2, "a sweep left entries the watermark expired"
        keyed_backend.set_watermark(T0)
        assert self._generations(keyed_backend) == {"young": 50, "old": 0}, \
            "after a sweep the expired entries must be gone even for an earlier watermark"

    @pytest.mark.parametrize("options", [SnapshotOptions(SnapshotType.CHECKPOINT), SnapshotOptions(SnapshotType.SAVEPOINT),
                                         SnapshotOptions(incremental=True)], ids=["full", "savepoint", "incremental"])
    def test_snapshots_and_restores_expire_by_the_watermark(self, state_backend, keyed_backend, snapshot_streams,
                                                            tmp_path, options):
        """A full snapshot leaves out what the watermark expired; an incremental one may keep it (its
        restore expires it); either way the restored entries keep their event times and event-time
        TTL, whatever the processing time."""
        self._write_generations(keyed_backend)
        keyed_backend.set_processing_time(T0 + 1000 * TTL)
        keyed_backend.set_watermark(T0 + TTL + 1)  # the first generation expired, the second not
        handle = keyed_backend.snapshot(1, options).write(snapshot_streams)
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            restored.set_processing_time(T0 + 1000 * TTL)
            restored.set_watermark(T0)  # an earlier watermark: whatever was written would be visible
            found = self._generations(restored)
            full = not options.incremental or not state_backend.capabilities.incremental_snapshots
            if full:
                assert found == {"young": 50, "old": 0}, (
                    f"a full {options.snapshot_type.value} taken at a watermark past the ttl of 'old' holds {found}: "
                    f"entries the watermark expired must be left out")
            restored.set_watermark(T0 + TTL + 1)
            assert self._generations(restored) == {"young": 50, "old": 0}, \
                "restored entries expire by the watermark from their own event times"
            restored.set_watermark(T0 + TTL // 2 + TTL)
            assert self._generations(restored) == {"young": 0, "old": 0}
        finally:
            restored.dispose()

    # --- the time of a state's TTL is recorded and kept
    def test_snapshots_record_the_time_of_the_ttl(self, keyed_backend, snapshot_streams):
        from statekit.spi.handles import StateMetaInfo

        at_event(keyed_backend, T0, T0)
        keyed_backend.set_processing_time(T0)
        keyed_backend.get_state(ValueStateDescriptor("by-event-time", ttl=EVENT_TTL)).update(1)
        keyed_backend.get_state(ValueStateDescriptor("by-processing-time", ttl=PROCESSING_TTL)).update(1)
        metas = {m.name: m for m in keyed_backend.snapshot(1).write(snapshot_streams).state_meta_infos()}
        if not metas:
            pytest.skip("the backend's handles do not record their states")
        event, processing = metas["by-event-time"], metas["by-processing-time"]
        assert event.ttl_time is TtlTimeCharacteristic.EVENT_TIME, f"the snapshot recorded {event}"
        assert "ttl_time" not in processing.to_json(), \
            "processing-time TTL is recorded as before event-time TTL existed (no ttl_time field)"
        old = StateMetaInfo.from_json({k: v for k, v in event.to_json().items() if k != "ttl_time"})
        assert old.ttl_time is TtlTimeCharacteristic.PROCESSING_TIME, "a record without ttl_time is processing time"

    @pytest.mark.parametrize("before, after", [(PROCESSING_TTL, EVENT_TTL), (EVENT_TTL, PROCESSING_TTL)],
                             ids=["to-event-time", "to-processing-time"])
    def test_a_restore_refuses_a_changed_time(self, state_backend, keyed_backend, snapshot_streams, tmp_path,
                                              before, after):
        at_event(keyed_backend, T0, T0)
        keyed_backend.set_processing_time(T0)
        keyed_backend.get_state(ValueStateDescriptor("switched", ttl=before)).update("v")
        handle = keyed_backend.snapshot(1).write(snapshot_streams)
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            restored.set_processing_time(T0)
            restored.set_watermark(T0)
            with expect_error(IncompatibleSerializerError, "registering a restored state with TTL on the other "
                              "time must be refused") as caught:
                restored.get_state(ValueStateDescriptor("switched", ttl=after))
            message = str(caught.value)
            assert before.time_characteristic.value in message and after.time_characteristic.value in message, \
                f"the error does not name both times: {message}"
            set_key(restored, "k")
            assert restored.get_state(ValueStateDescriptor("switched", ttl=before)).value() == "v", \
                "the state registered with its own time still reads"
        finally:
            restored.dispose()

    def test_registering_a_state_again_with_the_other_time_is_refused(self, keyed_backend):
        keyed_backend.get_state(ValueStateDescriptor("twice", ttl=PROCESSING_TTL))
        with expect_error(StateAccessError, "registering a state again with TTL on the other time must be refused"):
            keyed_backend.get_state(ValueStateDescriptor("twice", ttl=EVENT_TTL))

    def test_turning_event_time_ttl_on_writes_entries_at_the_watermark(self, state_backend, keyed_backend,
                                                                        snapshot_streams, tmp_path):
        set_key(keyed_backend, "k")
        keyed_backend.get_state(ValueStateDescriptor("enabled")).update("v")
        handle = keyed_backend.snapshot(1).write(snapshot_streams)
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=snapshot_streams)
        try:
            restored.set_watermark(T0)
            state = restored.get_state(ValueStateDescriptor("enabled", ttl=EVENT_TTL))
            at_event(restored, T0 + TTL - 1, None)
            assert state.value() == "v", "an entry that got event-time TTL expired before watermark + ttl"
            at_event(restored, T0 + TTL, None)
            assert state.value() is None, "an entry that got event-time TTL at watermark w lives until w + ttl"
        finally:
            restored.dispose()

    # --- helpers
    GENERATIONS = {"old": T0, "young": T0 + TTL // 2}

    def _states(self, backend: KeyedStateBackend) -> tuple[Any, Any]:
        return (backend.get_state(ValueStateDescriptor("event-value", ttl=EVENT_TTL)),
                backend.get_state(ListStateDescriptor("event-list", ttl=EVENT_TTL)))

    def _write_generations(self, backend: KeyedStateBackend) -> None:
        """50 keys written by elements of event time T0 ('old'), 50 of T0 + ttl/2 ('young'), while
        the watermark stands at T0 - ttl and processing time at T0."""
        value, elements = self._states(backend)
        backend.set_processing_time(T0)
        for generation, event_time in self.GENERATIONS.items():
            for i in range(50):
                at_event(backend, T0 - TTL, event_time, f"{generation}-{i}")
                value.update(i)
                elements.add_all([i, i + 1])
        backend.set_element_time(None)

    def _generations(self, backend: KeyedStateBackend) -> dict[str, int]:
        value, elements = self._states(backend)
        found = {"young": 0, "old": 0}
        for generation in self.GENERATIONS:
            for i in range(50):
                set_key(backend, f"{generation}-{i}")
                visible = (value.value() is not None, bool(elements.get()))
                if visible[0] != visible[1]:
                    raise AssertionError(f"key {generation}-{i}: entries written together expire together: {visible}")
                found[generation] += visible[0]
        return found


def _sweep_all(backend: KeyedStateBackend) -> int:
    """What sweeps remove until one removes nothing (each may stop early)."""
    removed = 0
    for _ in range(100):
        swept = backend.sweep_expired(10.0)
        removed += swept
        if not swept:
            break
    return removed


__all__ = ["EventTimeTtlTests", "KINDS", "TtlTests"]
