"""State semantics: ListState."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pytest

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import NAMESPACES, mixed_keys, prefix_keys, assert_keys, list_state
from statekit.serializers import Float64Serializer, Int64Serializer
from statekit.spi import KeyBatch, KeyedStateBackend, ListStateDescriptor, StateAccessError

# --------------------------------------------------------------------------------------------
# ListState


class ListStateSemantics(BackendTestBase):
    """``ListState``: empty is ``[]``, None elements rejected, order kept, copies returned."""

    def test_list_empty_reads_empty_list(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        got = state.get()
        assert got == [] and isinstance(got, list), f"an empty list state read {got!r}, expected []"

    def test_list_add_and_add_all_keep_order(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.add(3)
        state.add(1)
        state.add_all([2, 1, "x"])
        state.add_all(v for v in (0, (1, 2)))
        state.add(False)
        want = [3, 1, 2, 1, "x", 0, (1, 2), False]
        assert state.get() == want, f"list reads {state.get()!r}, expected {want!r} (insertion order)"

    def test_list_long_list_order(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        for i in range(500):
            state.add(i % 7)
        state.add_all(range(500, 1000))
        want = [i % 7 for i in range(500)] + list(range(500, 1000))
        got = state.get()
        mismatch = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        assert got == want, \
            f"a 1000-element list came back with {len(got)} elements, first mismatch at index {mismatch}"

    @pytest.mark.parametrize("serializer, values", [
        (Int64Serializer(), [-(2 ** 63), -1, 0, 7, 2 ** 63 - 1]),
        (Float64Serializer(), [-1.5, 0.0, 2.25, 1e300, float("-inf")]),
    ], ids=["int64", "float64"])
    def test_list_of_fixed_width_values(self, keyed_backend: KeyedStateBackend, serializer: Any,
                                        values: list[Any]) -> None:
        """Elements of a fixed-width serializer (which a backend may read at a fixed step) come back
        in order, per key and through the bulk API."""
        descriptor = ListStateDescriptor("fixed", serializer)
        state = list_state(keyed_backend, descriptor)
        for i, key in enumerate(("a", "b")):
            set_key(keyed_backend, key)
            state.add(values[i])
            state.add_all(values[i + 1:])
        bulk = keyed_backend.get_bulk_state(descriptor)
        got = bulk.get_many(KeyBatch.of(["a", "b", "c"], keyed_backend.max_parallelism))
        assert got == [values, values[1:], []], f"fixed-width lists through get_many: {got!r}"
        set_key(keyed_backend, "a")
        assert state.get() == values, f"a list of {type(serializer).__name__} values reads {state.get()!r}"

    def test_list_update_replaces(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.add_all([1, 2, 3])
        state.update([9, 8])
        assert state.get() == [9, 8], f"after update([9, 8]) list reads {state.get()!r}"
        state.update(v for v in "ab")
        assert state.get() == ["a", "b"], f"after update(generator) list reads {state.get()!r}"

    def test_list_update_takes_any_iterable(self, keyed_backend: KeyedStateBackend) -> None:
        """``update`` takes any iterable, also one whose truth value is an error (a numpy array, as a
        vectorized function has at hand); an empty one clears."""
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.update(np.array([1, 2]))
        assert state.get() == [1, 2], f"after update(np.array([1, 2])) list reads {state.get()!r}"
        state.update(np.array([], dtype=np.int64))
        assert state.get() == [], f"after update(an empty array) list reads {state.get()!r}, expected []"

    @pytest.mark.parametrize("empty", [[], None, ()], ids=["empty-list", "none", "empty-tuple"])
    def test_list_update_empty_or_none_clears(self, keyed_backend: KeyedStateBackend, empty: Any) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.add_all([1, 2])
        state.update(empty)
        assert state.get() == [], f"after update({empty!r}) list reads {state.get()!r}, expected []"
        assert_keys(keyed_backend, "l", [])

    def test_list_add_none_raises_and_keeps_state(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        with pytest.raises(StateAccessError):
            state.add(None)
        assert state.get() == [], f"a rejected add(None) left {state.get()!r}"
        assert_keys(keyed_backend, "l", [])
        state.add(1)
        with pytest.raises(StateAccessError):
            state.add(None)
        assert state.get() == [1], f"a rejected add(None) changed the list to {state.get()!r}"

    @pytest.mark.parametrize("make", [list, iter], ids=["list", "iterator"])
    def test_list_add_all_with_none_appends_nothing(self, keyed_backend: KeyedStateBackend,
                                               make: Callable[[Sequence[Any]], Iterable[Any]]) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        with pytest.raises(StateAccessError):
            state.add_all(make([1, None]))
        assert state.get() == [], f"a rejected add_all([1, None]) appended: list reads {state.get()!r}"
        state.add("first")
        with pytest.raises(StateAccessError):
            state.add_all(make([2, 3, None, 4]))
        assert state.get() == ["first"], \
            f"a rejected add_all([2, 3, None, 4]) appended: list reads {state.get()!r}, expected ['first']"

    def test_list_add_all_none_raises_and_keeps_state(self, keyed_backend: KeyedStateBackend) -> None:
        """Flink refuses ``addAll(null)`` ("List of values to add is null"); only ``update(None)`` clears."""
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        with pytest.raises(StateAccessError, match=r"add_all\(None\)"):
            state.add_all(None)
        assert_keys(keyed_backend, "l", [])
        state.add(1)
        with pytest.raises(StateAccessError, match=r"add_all\(None\)"):
            state.add_all(None)
        assert state.get() == [1], f"a rejected add_all(None) changed the list to {state.get()!r}"

    def test_list_update_with_none_element_raises(self, keyed_backend: KeyedStateBackend) -> None:
        """Flink rejects null elements in update() like in add()/addAll()."""
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.add("keep")
        with pytest.raises(StateAccessError):
            state.update([1, None])

    def test_list_add_all_empty_creates_no_state(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.add_all([])
        assert state.get() == [], f"after add_all([]) list reads {state.get()!r}"
        assert_keys(keyed_backend, "l", [])
        state.add(1)
        state.add_all([])
        assert state.get() == [1], f"add_all([]) changed [1] to {state.get()!r}"

    def test_list_get_returns_a_copy(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        empty = state.get()
        empty.append("leak")
        assert state.get() == [], f"appending to the list get() returned changed the state to {state.get()!r}"
        assert_keys(keyed_backend, "l", [])
        state.add_all([1, 2])
        got = state.get()
        got.append(3)
        got.remove(1)
        assert state.get() == [1, 2], f"mutating the list get() returned changed the state to {state.get()!r}"

    def test_list_arguments_are_not_aliased(self, keyed_backend: KeyedStateBackend) -> None:
        """Mutating the list passed to update()/add_all() afterwards does not change the state."""
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        values = [1, 2]
        state.update(values)
        values.append(3)
        assert state.get() == [1, 2], f"mutating update()'s argument changed the state to {state.get()!r}"
        more = [4]
        state.add_all(more)
        more.append(5)
        assert state.get() == [1, 2, 4], f"mutating add_all()'s argument changed the state to {state.get()!r}"

    def test_list_clear(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.add_all([1, 2])
        state.clear()
        assert state.get() == [], f"after clear() list reads {state.get()!r}"
        assert_keys(keyed_backend, "l", [])
        state.add(3)
        assert state.get() == [3], f"add after clear() reads {state.get()!r}, expected [3]"

    def test_list_key_isolation(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        keys = mixed_keys(300) + prefix_keys()
        for rnd in range(2):
            for i, key in enumerate(keys):
                set_key(keyed_backend, key)
                state.add((i, rnd))
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            assert state.get() == [(i, 0), (i, 1)], \
                f"key {key!r} reads {state.get()!r}, expected {[(i, 0), (i, 1)]!r}"
        set_key(keyed_backend, "a")
        state.clear()
        set_key(keyed_backend, "ab")
        assert state.get() != [], "clearing key 'a' cleared key 'ab'"
        assert_keys(keyed_backend, "l", [k for k in keys if k != "a"])

    def test_list_namespace_isolation(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        for i, ns in enumerate(NAMESPACES):
            state.set_current_namespace(ns)
            state.add_all([i, i])
        for i, ns in enumerate(NAMESPACES):
            state.set_current_namespace(ns)
            assert state.get() == [i, i], f"namespace {ns!r} reads {state.get()!r}, expected {[i, i]!r}"
        state.set_current_namespace("w")
        state.clear()
        state.set_current_namespace("w1")
        assert state.get() == [NAMESPACES.index("w1")] * 2, \
            f"clearing namespace 'w' changed namespace 'w1' to {state.get()!r}"
        assert_keys(keyed_backend, "l", [], "w")
        assert_keys(keyed_backend, "l", ["k"], "w1")
