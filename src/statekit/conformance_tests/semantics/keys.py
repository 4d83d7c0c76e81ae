"""State semantics: ``KeyedStateBackend.keys()``."""
from __future__ import annotations

import operator

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import (
    mixed_keys, assert_keys, value_state, list_state, map_state, reducing_state,
)
from statekit.spi import (
    KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor,
)

# --------------------------------------------------------------------------------------------
# backend.keys()


class KeyIterationSemantics(BackendTestBase):
    """``KeyedStateBackend.keys``: every key with state, once, per state and namespace."""

    def test_keys_ten_thousand_keys_each_once(self, keyed_backend: KeyedStateBackend) -> None:
        keys = mixed_keys(10_000)
        value = value_state(keyed_backend, ValueStateDescriptor("v"))
        mapped = map_state(keyed_backend, MapStateDescriptor("m"))
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            value.update(i)
            if i % 2 == 0:
                mapped.put("a", 1)
                mapped.put("b", 2)  # several entries per key must still list the key once
        assert_keys(keyed_backend, "v", keys)
        assert_keys(keyed_backend, "m", keys[::2])

    def test_keys_after_partial_clear(self, keyed_backend: KeyedStateBackend) -> None:
        keys = mixed_keys(2_000)
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        for key in keys:
            set_key(keyed_backend, key)
            state.add(1)
            state.add(2)
        for key in keys[::2]:
            set_key(keyed_backend, key)
            state.clear()
        assert_keys(keyed_backend, "l", keys[1::2])

    def test_keys_per_state_and_namespace(self, keyed_backend: KeyedStateBackend) -> None:
        a = value_state(keyed_backend, ValueStateDescriptor("a"))
        b = reducing_state(keyed_backend, ReducingStateDescriptor("b", reduce_function=operator.add))
        for i in range(100):
            set_key(keyed_backend, i)
            if i % 2:
                a.update(i)
            if i % 5 == 0:
                b.set_current_namespace(("window", i % 3))
                b.add(i)
        assert_keys(keyed_backend, "a", range(1, 100, 2))
        assert_keys(keyed_backend, "b", [])
        for w in range(3):
            assert_keys(keyed_backend, "b", [i for i in range(0, 100, 5) if i % 3 == w], ("window", w))
