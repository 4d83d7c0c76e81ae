"""State semantics: AggregatingState."""
from __future__ import annotations

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import (
    mixed_keys, prefix_keys, assert_keys, aggregating_state, Average, MutableAverage, Collect,
)
from statekit.spi import AggregatingStateDescriptor, KeyedStateBackend, VOID_NAMESPACE

# --------------------------------------------------------------------------------------------
# AggregatingState


class AggregatingStateSemantics(BackendTestBase):
    """``AggregatingState``: ``None`` when empty, ``get()`` is ``get_result(accumulator)``."""

    def test_aggregating_average(self, keyed_backend: KeyedStateBackend) -> None:
        state = aggregating_state(keyed_backend, AggregatingStateDescriptor("g", aggregate_function=Average()))
        set_key(keyed_backend, "k")
        assert state.get() is None, f"an empty aggregating state reads {state.get()!r}, expected None"
        for value in (1, 2, 6):
            state.add(value)
        assert state.get() == 3.0, f"average of 1, 2, 6 reads {state.get()!r}, expected 3.0"
        state.add(7)
        assert state.get() == 4.0, f"average of 1, 2, 6, 7 reads {state.get()!r}, expected 4.0"

    def test_aggregating_get_returns_result_not_accumulator(self, keyed_backend: KeyedStateBackend) -> None:
        state = aggregating_state(keyed_backend, AggregatingStateDescriptor("g", aggregate_function=Collect()))
        set_key(keyed_backend, "k")
        state.add("x")
        state.add("y")
        assert state.get() == ["result", "x", "y"], \
            f"get() is {state.get()!r}, expected get_result(accumulator) = ['result', 'x', 'y']"

    def test_aggregating_clear(self, keyed_backend: KeyedStateBackend) -> None:
        state = aggregating_state(keyed_backend, AggregatingStateDescriptor("g", aggregate_function=Average()))
        set_key(keyed_backend, "k")
        state.add(10)
        state.clear()
        assert state.get() is None, f"after clear() state reads {state.get()!r}, expected None"
        assert_keys(keyed_backend, "g", [])
        state.add(4)
        assert state.get() == 4.0, f"add(4) after clear() reads {state.get()!r}, expected a fresh average 4.0"

    def test_aggregating_mutable_accumulator_not_shared(self, keyed_backend: KeyedStateBackend) -> None:
        """Each key and namespace gets its own create_accumulator(); in-place updates never leak."""
        state = aggregating_state(keyed_backend,
                                  AggregatingStateDescriptor("g", aggregate_function=MutableAverage()))
        cells = [(key, ns) for key in ("A", "B", 3) for ns in (VOID_NAMESPACE, "w")]
        for i, (key, ns) in enumerate(cells):
            set_key(keyed_backend, key)
            state.set_current_namespace(ns)
            state.add(10 * (i + 1))
            state.add(10 * (i + 1) + 2)
        for i, (key, ns) in enumerate(cells):
            set_key(keyed_backend, key)
            state.set_current_namespace(ns)
            want = 10 * (i + 1) + 1
            assert state.get() == want, \
                f"key {key!r} namespace {ns!r} averages {state.get()!r}, expected {want} (accumulator shared?)"

    def test_aggregating_key_isolation(self, keyed_backend: KeyedStateBackend) -> None:
        state = aggregating_state(keyed_backend, AggregatingStateDescriptor("g", aggregate_function=Average()))
        keys = mixed_keys(200) + prefix_keys()
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            state.add(i)
            state.add(i + 2)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            assert state.get() == i + 1, f"key {key!r} averages {state.get()!r}, expected {i + 1}"
        assert_keys(keyed_backend, "g", keys)
