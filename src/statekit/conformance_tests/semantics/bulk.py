"""State semantics: bulk access (``KeyedStateBackend.get_bulk_state``, ``spi.bulk_state``).

A bulk call must do exactly what a loop of per-key calls does on the same cells, whether the
backend implements it itself or inherits the per-key loop: per-key reads see bulk writes and
the other way round, duplicates apply in order, namespaces stay apart, nothing is written when
the input is refused, and snapshots hold what bulk calls wrote.
"""
from __future__ import annotations

import operator
from typing import Any

import pytest

from statekit.conformance_tests.base import BackendTestBase, open_keyed_backend, set_key
from statekit.conformance_tests.semantics.common import Average, mixed_keys
from statekit.conformance_tests.snapshot_support import SNAPSHOT_MODES, snapshot_options_for
from statekit.spi import (
    AggregatingStateDescriptor, KeyBatch, KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, StateAccessError, StateBackend, StateTtlConfig, ValueStateDescriptor,
)
from statekit.storage.inline import InlineStreams

KEYS = mixed_keys(60)  # strings, ints and tuples spread over many key groups


def batch(backend: KeyedStateBackend, keys: list[Any]) -> KeyBatch:
    return KeyBatch.of(keys, backend.max_parallelism)


def per_key(backend: KeyedStateBackend, state: Any, keys: list[Any], read: Any = None) -> list[Any]:
    """What the per-key API reads for each key (``read(state)``, default ``state.value()``)."""
    values = []
    for key in keys:
        set_key(backend, key)
        values.append(read(state) if read is not None else state.value())
    return values


class BulkStateSemantics(BackendTestBase):
    """Bulk reads and writes of every kind, against the per-key API on the same backend."""

    # --- value
    def test_bulk_value_unset_reads_default_copies(self, keyed_backend: KeyedStateBackend) -> None:
        bulk = keyed_backend.get_bulk_state(ValueStateDescriptor("v", default=[0]))
        first = bulk.get_many(batch(keyed_backend, KEYS[:3]))
        assert first == [[0], [0], [0]], f"unset keys read {first!r}, expected the default [0] for each"
        first[0].append(1)
        again = bulk.get_many(batch(keyed_backend, KEYS[:1]))
        assert again == [[0]], f"changing a returned default changed the default: read {again!r}"

    def test_bulk_value_writes_are_per_key_reads(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ValueStateDescriptor("v", default=-1)
        bulk, state = keyed_backend.get_bulk_state(descriptor), keyed_backend.get_state(descriptor)
        bulk.update_many(batch(keyed_backend, KEYS), list(range(len(KEYS))))
        got = per_key(keyed_backend, state, KEYS)
        assert got == list(range(len(KEYS))), f"per-key reads after update_many: {got!r}"
        for i, key in enumerate(KEYS[::2]):
            set_key(keyed_backend, key)
            state.update(1000 + i)
        expected = [1000 + i // 2 if i % 2 == 0 else i for i in range(len(KEYS))]
        got = bulk.get_many(batch(keyed_backend, KEYS))
        assert got == expected, f"get_many after per-key updates read {got!r}, expected {expected!r}"

    def test_bulk_writes_replace_per_key_writes_before_them(self, keyed_backend: KeyedStateBackend) -> None:
        """Per-key writes, then bulk writes of some of the same cells: the bulk writes win, in both
        views (a backend that keeps per-key writes aside, as LMDB's write-behind puts, must not let
        them reappear over the bulk writes)."""
        value, listed = ValueStateDescriptor("v"), ListStateDescriptor("l")
        bulk_value, value_state = keyed_backend.get_bulk_state(value), keyed_backend.get_state(value)
        bulk_list, list_state = keyed_backend.get_bulk_state(listed), keyed_backend.get_state(listed)
        for i, key in enumerate(KEYS):
            set_key(keyed_backend, key)
            value_state.update(f"per-key {i}")
            list_state.add(i)
        bulk_value.update_many(batch(keyed_backend, KEYS[::2]), [f"bulk {i}" for i in range(0, len(KEYS), 2)])
        bulk_value.clear_many(batch(keyed_backend, KEYS[1::4]))
        bulk_list.add_many(batch(keyed_backend, KEYS[::3]), [[-i] for i in range(0, len(KEYS), 3)])
        expected = [f"bulk {i}" if i % 2 == 0 else None if i % 4 == 1 else f"per-key {i}" for i in range(len(KEYS))]
        got = per_key(keyed_backend, value_state, KEYS)
        assert got == expected, f"per-key reads after per-key, then bulk writes: {got!r}, expected {expected!r}"
        got = bulk_value.get_many(batch(keyed_backend, KEYS))
        assert got == expected, f"get_many after per-key, then bulk writes: {got!r}, expected {expected!r}"
        expected_lists = [[i, -i] if i % 3 == 0 else [i] for i in range(len(KEYS))]
        got = per_key(keyed_backend, list_state, KEYS, lambda state: state.get())
        assert got == expected_lists, f"per-key list reads after add, then add_many: {got!r}"

    def test_bulk_value_none_clears_and_duplicates_apply_in_order(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ValueStateDescriptor("v")
        bulk = keyed_backend.get_bulk_state(descriptor)
        a, b = KEYS[0], KEYS[1]
        bulk.update_many(batch(keyed_backend, [a, b, a]), ["first", "b", "second"])
        got = bulk.get_many(batch(keyed_backend, [a, b]))
        assert got == ["second", "b"], f"a key given twice must keep its later value: read {got!r}"
        bulk.update_many(batch(keyed_backend, [a, b]), [None, "b2"])
        got = bulk.get_many(batch(keyed_backend, [a, b]))
        assert got == [None, "b2"], f"update_many with None must clear: read {got!r}"
        assert list(keyed_backend.keys("v")) == [b], \
            f"a key cleared by update_many(None) is still listed by keys(): {list(keyed_backend.keys('v'))!r}"
        bulk.clear_many(batch(keyed_backend, [b]))
        assert list(keyed_backend.keys("v")) == [], "clear_many left a key"

    def test_bulk_value_is_a_copy(self, keyed_backend: KeyedStateBackend) -> None:
        bulk = keyed_backend.get_bulk_state(ValueStateDescriptor("v"))
        held = [1, 2]
        bulk.update_many(batch(keyed_backend, KEYS[:1]), [held])
        held.append(3)
        read = bulk.get_many(batch(keyed_backend, KEYS[:1]))[0]
        read.append(4)
        again = bulk.get_many(batch(keyed_backend, KEYS[:1]))
        assert again == [[1, 2]], f"mutating a written or read value reached the state: {again!r}"

    def test_bulk_namespaces_are_apart(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ValueStateDescriptor("v")
        bulk, state = keyed_backend.get_bulk_state(descriptor), keyed_backend.get_state(descriptor)
        keys = batch(keyed_backend, KEYS[:5])
        bulk.update_many(keys, ["void"] * 5)
        bulk.set_current_namespace("w1")
        bulk.update_many(keys, ["w1"] * 5)
        assert bulk.get_many(keys) == ["w1"] * 5, "bulk reads in namespace w1 do not see its writes"
        got = per_key(keyed_backend, state, KEYS[:5])
        assert got == ["void"] * 5, \
            f"the bulk state's namespace leaked into the per-key state (or the void namespace): {got!r}"
        state.set_current_namespace("w1")
        got = per_key(keyed_backend, state, KEYS[:5])
        assert got == ["w1"] * 5, f"per-key reads in namespace w1 after bulk writes there: {got!r}"

    def test_bulk_refused_input_writes_nothing(self, keyed_backend: KeyedStateBackend) -> None:
        bulk = keyed_backend.get_bulk_state(ValueStateDescriptor("v"))
        with pytest.raises(StateAccessError):
            bulk.update_many(batch(keyed_backend, KEYS[:3]), [1, 2])
        with pytest.raises(StateAccessError):
            KeyBatch(KEYS[:3], [0, 1])
        assert list(keyed_backend.keys("v")) == [], "a refused update_many wrote state"

    def test_bulk_key_outside_range_is_refused(self, state_backend: StateBackend, tmp_path: Any) -> None:
        backend = open_keyed_backend(state_backend, str(tmp_path / "half"), subtask_index=0, parallelism=2)
        try:
            bulk = backend.get_bulk_state(ValueStateDescriptor("v"))
            outside = next(k for k in KEYS if batch(backend, [k]).key_groups[0] not in backend.key_group_range)
            with pytest.raises(StateAccessError):
                bulk.update_many(batch(backend, [outside]), [1])
            with pytest.raises(StateAccessError):
                bulk.get_many(batch(backend, [outside]))
        finally:
            backend.dispose()

    # --- list
    def test_bulk_list_add_update_and_per_key_view(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ListStateDescriptor("l")
        bulk, state = keyed_backend.get_bulk_state(descriptor), keyed_backend.get_state(descriptor)
        a, b, c = KEYS[:3]
        set_key(keyed_backend, a)
        state.add("a0")
        bulk.add_many(batch(keyed_backend, [a, b, a, c]), [["a1"], ["b1", "b2"], ["a2"], []])
        got = bulk.get_many(batch(keyed_backend, [a, b, c]))
        assert got == [["a0", "a1", "a2"], ["b1", "b2"], []], f"lists after add_many: {got!r}"
        assert per_key(keyed_backend, state, [a, b], lambda s: s.get()) == [["a0", "a1", "a2"], ["b1", "b2"]], \
            "per-key reads do not see add_many's elements"
        bulk.update_many(batch(keyed_backend, [a, b]), [["x"], None])
        got = bulk.get_many(batch(keyed_backend, [a, b]))
        assert got == [["x"], []], f"update_many must replace, None must clear: {got!r}"

    def test_bulk_list_none_element_appends_nothing(self, keyed_backend: KeyedStateBackend) -> None:
        bulk = keyed_backend.get_bulk_state(ListStateDescriptor("l"))
        with pytest.raises(StateAccessError):
            bulk.add_many(batch(keyed_backend, KEYS[:2]), [["ok"], ["x", None]])
        got = bulk.get_many(batch(keyed_backend, KEYS[:2]))
        assert got == [[], []], f"add_many with a None element appended {got!r}"

    # --- map
    def test_bulk_map_entries(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = MapStateDescriptor("m")
        bulk, state = keyed_backend.get_bulk_state(descriptor), keyed_backend.get_state(descriptor)
        a, b = KEYS[:2]
        bulk.put_many(batch(keyed_backend, [a, a, b]), ["x", "y", "x"], [1, 2, 3])
        got = bulk.get_many(batch(keyed_backend, [a, a, b, b]), ["x", "y", "x", "y"])
        assert got == [1, 2, 3, None], f"map entries after put_many: {got!r}"
        bulk.remove_many(batch(keyed_backend, [a]), ["x"])
        assert per_key(keyed_backend, state, [a], lambda s: dict(s.items())) == [{"y": 2}], \
            "per-key view after remove_many"

    # --- reducing and aggregating
    def test_bulk_reducing_adds_to_what_is_held(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ReducingStateDescriptor("r", reduce_function=operator.add)
        bulk, state = keyed_backend.get_bulk_state(descriptor), keyed_backend.get_state(descriptor)
        a, b, c = KEYS[:3]
        set_key(keyed_backend, a)
        state.add(100)
        bulk.add_many(batch(keyed_backend, [a, b, a]), [1, 2, 3])
        got = bulk.get_many(batch(keyed_backend, [a, b, c]))
        assert got == [104, 2, None], f"reducing state after add_many: {got!r} (expected [104, 2, None])"
        with pytest.raises(StateAccessError):
            bulk.add_many(batch(keyed_backend, [a, b]), [1, None])
        got = bulk.get_many(batch(keyed_backend, [a, b]))
        assert got == [104, 2], f"add_many with None added something: {got!r}"

    def test_bulk_reducing_leaves_the_given_values_alone(self, keyed_backend: KeyedStateBackend) -> None:
        """A reduce function may change its first argument in place (and return it): that is the
        state's value, never the caller's. A backend that kept a key's first value as given reduced
        the key's next value into the caller's own object."""
        def extend(held: list, new: list) -> list:
            held.extend(new)
            return held

        bulk = keyed_backend.get_bulk_state(ReducingStateDescriptor("r", reduce_function=extend))
        a, b = KEYS[:2]
        values = [[1], [2], [3], [4]]
        bulk.add_many(batch(keyed_backend, [a, b, a, a]), values)
        assert values == [[1], [2], [3], [4]], f"add_many changed the values it was given: {values!r}"
        got = bulk.get_many(batch(keyed_backend, [a, b]))
        assert got == [[1, 3, 4], [2]], f"reducing state after add_many: {got!r}"

    def test_bulk_aggregating_adds(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = AggregatingStateDescriptor("g", aggregate_function=Average())
        bulk, state = keyed_backend.get_bulk_state(descriptor), keyed_backend.get_state(descriptor)
        a, b = KEYS[:2]
        bulk.add_many(batch(keyed_backend, [a, a, b]), [1.0, 3.0, 5.0])
        got = bulk.get_many(batch(keyed_backend, [a, b]))
        assert got == [2.0, 5.0], f"aggregating state after add_many: {got!r}"
        set_key(keyed_backend, a)
        state.add(8.0)
        got = bulk.get_many(batch(keyed_backend, [a]))
        assert got == [4.0], f"get_many after a per-key add: {got!r}"

    # --- snapshots
    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    def test_bulk_writes_are_in_snapshots(self, state_backend: StateBackend, keyed_backend: KeyedStateBackend,
                                          tmp_path: Any, mode: str) -> None:
        options = snapshot_options_for(mode, state_backend)
        value = ValueStateDescriptor("v")
        items = ListStateDescriptor("l")
        total = ReducingStateDescriptor("r", reduce_function=operator.add)
        streams = InlineStreams()
        keys = batch(keyed_backend, KEYS)
        keyed_backend.get_bulk_state(value).update_many(keys, list(range(len(KEYS))))
        keyed_backend.snapshot(1, options).write(streams)  # a base, so an incremental one holds a delta
        keyed_backend.notify_checkpoint_complete(1)
        keyed_backend.get_bulk_state(value).update_many(keys, [i * 10 if i % 3 else None for i in range(len(KEYS))])
        keyed_backend.get_bulk_state(items).add_many(keys, [[i] for i in range(len(KEYS))])
        keyed_backend.get_bulk_state(total).add_many(keys, [i for i in range(len(KEYS))])
        handle = keyed_backend.snapshot(2, options).write(streams)
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=streams)
        try:
            restored_keys = batch(restored, KEYS)
            got = restored.get_bulk_state(value).get_many(restored_keys)
            expected = [i * 10 if i % 3 else None for i in range(len(KEYS))]
            assert got == expected, f"{mode} snapshot: value state restored as {got!r}, expected {expected!r}"
            assert restored.get_bulk_state(items).get_many(restored_keys) == [[i] for i in range(len(KEYS))], \
                f"{mode} snapshot: list state written by add_many not restored"
            assert restored.get_bulk_state(total).get_many(restored_keys) == list(range(len(KEYS))), \
                f"{mode} snapshot: reducing state written by add_many not restored"
        finally:
            restored.dispose()

    def test_bulk_writes_after_snapshot_sync_part_do_not_leak(self, state_backend: StateBackend,
                                                              keyed_backend: KeyedStateBackend, tmp_path: Any) -> None:
        value = ValueStateDescriptor("v")
        keys = batch(keyed_backend, KEYS)
        bulk = keyed_backend.get_bulk_state(value)
        bulk.update_many(keys, ["before"] * len(KEYS))
        pending = keyed_backend.snapshot(1)
        bulk.update_many(keys, ["after"] * len(KEYS))
        streams = InlineStreams()
        handle = pending.write(streams)
        restored = open_keyed_backend(state_backend, str(tmp_path / "restored"), restore_handles=[handle],
                                      restore_streams=streams)
        try:
            got = set(restored.get_bulk_state(value).get_many(batch(restored, KEYS)))
            assert got == {"before"}, f"bulk writes after the synchronous part reached the snapshot: {got!r}"
        finally:
            restored.dispose()

    # --- TTL: bulk access to a state with TTL expires like per-key access
    def test_bulk_ttl_expiry(self, state_backend: StateBackend, keyed_backend: KeyedStateBackend) -> None:
        if not state_backend.capabilities.ttl:
            pytest.skip(f"{type(state_backend).__name__} does not declare the 'ttl' capability")
        descriptor = ValueStateDescriptor("t", default="gone", ttl=StateTtlConfig(ttl_seconds=1.0))
        bulk, state = keyed_backend.get_bulk_state(descriptor), keyed_backend.get_state(descriptor)
        keys = batch(keyed_backend, KEYS[:4])
        keyed_backend.set_processing_time(10_000)
        bulk.update_many(keys, ["here"] * 4)
        keyed_backend.set_processing_time(10_999)
        assert bulk.get_many(keys) == ["here"] * 4, "bulk-written entries expired before their TTL"
        assert per_key(keyed_backend, state, KEYS[:4]) == ["here"] * 4, "per-key reads of bulk-written TTL entries"
        keyed_backend.set_processing_time(11_000)
        got = bulk.get_many(keys)
        assert got == ["gone"] * 4, f"bulk reads after the TTL passed: {got!r}, expected the default"
