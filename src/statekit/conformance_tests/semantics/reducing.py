"""State semantics: ReducingState."""
from __future__ import annotations

import operator
from typing import Any, Callable

import pytest

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import mixed_keys, prefix_keys, assert_keys, reducing_state, concat
from statekit.spi import KeyedStateBackend, ReducingStateDescriptor, ValueStateDescriptor, VOID_NAMESPACE

# --------------------------------------------------------------------------------------------
# ReducingState


class ReducingStateSemantics(BackendTestBase):
    """``ReducingState``: ``None`` when empty, keeps ``reduce(reduce(a, b), c)``."""

    @pytest.mark.parametrize("fn, inputs, want", [
        (operator.add, [1, 2, 3, 4], 10),
        (max, [3, 9, 2], 9),
        (concat, ["a", "b", "c"], "abc"),
    ], ids=["sum", "max", "concat-order"])
    def test_reducing_add_reduces(self, keyed_backend: KeyedStateBackend, fn: Callable[[Any, Any], Any],
                         inputs: list[Any], want: Any) -> None:
        state = reducing_state(keyed_backend, ReducingStateDescriptor("r", reduce_function=fn))
        set_key(keyed_backend, "k")
        assert state.get() is None, f"an empty reducing state reads {state.get()!r}, expected None"
        for value in inputs:
            state.add(value)
        assert state.get() == want, f"after adding {inputs!r} state reads {state.get()!r}, expected {want!r}"

    def test_reducing_state_follows_the_descriptor_it_is_asked_with(self, keyed_backend: KeyedStateBackend) -> None:
        """A backend kept for the next epoch (Spark's parked backends) serves a new function
        instance, whose descriptor binds its own reduce function and default: the state asked for
        with it must use them, as a backend restored from storage does, not the previous epoch's."""
        scaled = _Scaled(1)
        set_key(keyed_backend, "k")
        keyed_backend.get_state(ReducingStateDescriptor("r", reduce_function=scaled.add)).add(1)
        later = _Scaled(10)  # the next epoch's function instance
        state = keyed_backend.get_state(ReducingStateDescriptor("r", reduce_function=later.add))
        state.add(1)
        assert state.get() == 11, f"the state reduced with the first descriptor's function: {state.get()!r}, not 11"
        value = keyed_backend.get_state(ValueStateDescriptor("v", default=1))
        assert value.value() == 1
        assert keyed_backend.get_state(ValueStateDescriptor("v", default=2)).value() == 2, \
            "the state kept the default of the first descriptor it was asked with"

    def test_reducing_single_value_and_falsy_result(self, keyed_backend: KeyedStateBackend) -> None:
        state = reducing_state(keyed_backend, ReducingStateDescriptor("r", reduce_function=operator.add))
        set_key(keyed_backend, "k")
        state.add(0)
        assert state.get() == 0, f"after add(0) state reads {state.get()!r}, expected 0 (not None)"
        state.add(5)
        state.add(-5)
        assert state.get() == 0, f"after 0 + 5 - 5 state reads {state.get()!r}, expected 0"
        assert_keys(keyed_backend, "r", ["k"])

    def test_reducing_clear(self, keyed_backend: KeyedStateBackend) -> None:
        state = reducing_state(keyed_backend, ReducingStateDescriptor("r", reduce_function=operator.add))
        set_key(keyed_backend, "k")
        state.add(2)
        state.clear()
        assert state.get() is None, f"after clear() state reads {state.get()!r}, expected None"
        assert_keys(keyed_backend, "r", [])
        state.add(3)
        assert state.get() == 3, f"add(3) after clear() reads {state.get()!r}, expected 3"

    def test_reducing_key_and_namespace_isolation(self, keyed_backend: KeyedStateBackend) -> None:
        state = reducing_state(keyed_backend, ReducingStateDescriptor("r", reduce_function=operator.add))
        keys = mixed_keys(200) + prefix_keys()
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ns in (VOID_NAMESPACE, "w"):
                state.set_current_namespace(ns)
                for _ in range(3):
                    state.add(i if ns is None else -i)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ns in (VOID_NAMESPACE, "w"):
                state.set_current_namespace(ns)
                want = 3 * i if ns is None else -3 * i
                assert state.get() == want, f"key {key!r} namespace {ns!r} reads {state.get()!r}, expected {want}"
        assert_keys(keyed_backend, "r", keys)
        assert_keys(keyed_backend, "r", keys, "w")


class _Scaled:
    """A reduce function bound to its function instance (``a + b * factor``)."""

    def __init__(self, factor: int) -> None:
        self.factor = factor

    def add(self, a: int, b: int) -> int:
        return a + b * self.factor
