"""State semantics: Values are copies, and map user keys are equal by their serialized bytes."""
from __future__ import annotations

import operator
from typing import Any

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import (
    value_state, list_state, map_state, reducing_state, aggregating_state, Collect,
)
from statekit.spi import (
    AggregatingStateDescriptor, KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
    ValueStateDescriptor,
)

# --------------------------------------------------------------------------------------------
# Values are copies: a change reaches state only through a state method


class ValueCopySemantics(BackendTestBase):
    """Every backend agrees on what mutating an object in place means: nothing. A value read from
    state is the caller's copy, and a value handed to a state method is not kept by reference, as
    in a backend that stores bytes. (A heap backend that shares objects would keep such
    mutations, and a snapshot it holds would change after its synchronous part.)"""

    def test_value_in_place_mutation_is_not_kept(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        set_key(keyed_backend, "k")
        given = {"n": 1, "items": [1]}
        state.update(given)
        given["n"] = 2
        given["items"].append(2)
        read = state.value()
        read["n"] = 99
        read["items"].append(99)
        assert state.value() == {"n": 1, "items": [1]}, \
            f"mutating objects passed to or read from update()/value() changed the state to {state.value()!r}"

    def test_nested_values_mutated_at_any_depth_are_not_kept(self, keyed_backend: KeyedStateBackend) -> None:
        """Rows in lists in maps, as a join buffers them, and values nested deeper than that: a
        change at any depth of what was given or read stays out of the state."""
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        deep: Any = [0]
        for level in range(8):
            deep = {"level": level, "inner": [deep, (level, [level])]}
        given = [[{"id": 1, "tags": ["a"]}, False], [{"id": 2, "tags": []}, True]]
        pair = ("t", ["a"])
        state.put(1, given)
        state.put(2, deep)
        state.put(3, pair)
        pair[1].append("x")
        state.get(3)[1].append("y")
        given[0][0]["tags"].append("x")
        given[1][1] = False
        deep["inner"][0]["inner"][1][1].append("x")
        for user_key, read in state.items():
            if user_key == 2:
                read["inner"][0]["inner"][1][1].append("y")
        state.get(1)[0][0]["tags"].append("y")
        assert state.get(1) == [[{"id": 1, "tags": ["a"]}, False], [{"id": 2, "tags": []}, True]]
        assert state.get(3) == ("t", ["a"])
        inner = state.get(2)["inner"][0]["inner"]
        assert inner[1] == (6, [6]) and inner[0]["level"] == 5, "a value nested 8 levels deep changed"

    def test_list_in_place_mutation_of_elements_is_not_kept(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        element = {"seen": [1]}
        state.add(element)
        element["seen"].append(2)
        state.add_all([[1]])
        read = state.get()
        read[0]["seen"].append(99)
        read[1].append(99)
        assert state.get() == [{"seen": [1]}, [1]], \
            f"mutating list elements in place changed the state to {state.get()!r}"

    def test_map_in_place_mutation_of_values_is_not_kept(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        value = [1]
        state.put("a", value)
        value.append(2)
        state.get("a").append(99)
        for _, read in state.items():
            read.append(98)
        assert state.get("a") == [1], f"mutating a map value in place changed the state to {state.get('a')!r}"

    def test_reducing_and_aggregating_results_are_copies(self, keyed_backend: KeyedStateBackend) -> None:
        reducing = reducing_state(keyed_backend, ReducingStateDescriptor("r", reduce_function=operator.add))
        aggregating = aggregating_state(keyed_backend, AggregatingStateDescriptor("a", aggregate_function=Collect()))
        set_key(keyed_backend, "k")
        first = [1]
        reducing.add(first)
        first.append(2)
        reducing.get().append(99)
        assert reducing.get() == [1], f"mutating reducing state's input or result changed it to {reducing.get()!r}"
        element = [1]
        aggregating.add(element)
        element.append(2)
        aggregating.get()[1].append(99)
        assert aggregating.get() == ["result", [1]], \
            f"mutating aggregating state's input or result changed it to {aggregating.get()!r}"


# --------------------------------------------------------------------------------------------
# Map user keys are equal when their serialized bytes are


class MapUserKeyEquality(BackendTestBase):
    """``1``, ``True`` and ``1.0`` are equal in Python but serialize differently: every backend
    keeps them as three entries (a byte store cannot do otherwise), so a backend switch through a
    savepoint never changes a map's contents."""

    EQUAL_IN_PYTHON: tuple[Any, ...] = (1, True, 1.0, (1,), (True,), 0, False, 0.0, -0.0)

    def test_map_user_keys_equal_in_python_stay_distinct(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        for i, user_key in enumerate(self.EQUAL_IN_PYTHON):
            state.put(user_key, i)
        got = list(state.items())
        assert len(got) == len(self.EQUAL_IN_PYTHON), \
            f"{len(self.EQUAL_IN_PYTHON)} user keys that differ in serialized bytes became {len(got)} entries: {got!r}"
        found = sorted((repr(k), type(k).__name__, v) for k, v in got)
        want = sorted((repr(k), type(k).__name__, i) for i, k in enumerate(self.EQUAL_IN_PYTHON))
        assert found == want, f"items() is {found}, expected {want} (key types must survive)"
        for i, user_key in enumerate(self.EQUAL_IN_PYTHON):
            assert state.get(user_key) == i, f"get({user_key!r}) is {state.get(user_key)!r}, expected {i}"
        state.remove(True)
        assert state.contains(1) and state.contains(1.0) and not state.contains(True), \
            "remove(True) removed another user key, or did not remove True"
