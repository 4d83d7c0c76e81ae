"""State semantics of keys: ``KeyedStateBackend.keys()``, and keys that do not serialize."""
from __future__ import annotations

import operator
import threading
from collections import Counter

import pytest

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.spi.key_groups import key_group_for_key
from statekit.conformance_tests.expect import expect_error
from statekit.conformance_tests.semantics.common import (
    mixed_keys, assert_keys, value_state, list_state, map_state, reducing_state,
)
from statekit.spi import (
    VOID_NAMESPACE, KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
    SerializationError, ValueStateDescriptor,
)
from statekit.storage.inline import InlineStreams

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

    def test_keys_of_many_lengths_in_many_key_groups(self, keyed_backend: KeyedStateBackend) -> None:
        """Keys of 1 to 300 characters (stored-key length prefixes of one and two bytes; more
        combinations of key group and key length than a byte store keeps cached), 20 of each length:
        each reads back its own value and map entry, in the void namespace and in another."""
        keys = list(dict.fromkeys((str(i) + "k" * length)[:length] for length in range(1, 301) for i in range(20)))
        value = value_state(keyed_backend, ValueStateDescriptor("v"))
        mapped = map_state(keyed_backend, MapStateDescriptor("m"))
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            value.update(i)
            mapped.put(i % 7, key)
            value.set_current_namespace("other")
            value.update(-i)
            value.set_current_namespace(VOID_NAMESPACE)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            assert value.value() == i and mapped.get(i % 7) == key and list(mapped.keys()) == [i % 7]
            value.set_current_namespace("other")
            assert value.value() == -i
            value.set_current_namespace(VOID_NAMESPACE)
        assert_keys(keyed_backend, "v", keys)
        assert_keys(keyed_backend, "v", keys, "other")

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

    def test_keys_and_key_groups_give_each_key_its_key_group(self, keyed_backend: KeyedStateBackend) -> None:
        """``keys_and_key_groups``: every key with state once, with the key group it is kept in (what
        ``apply_to_keyed_state`` of the broadcast pattern makes current). A backend that returns
        None does not support that pattern."""
        keys = mixed_keys(2_000)
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        for key in keys:
            set_key(keyed_backend, key)
            state.update(1)
        found = keyed_backend.keys_and_key_groups("v")
        if found is None:
            pytest.skip("keys_and_key_groups returns None: the backend does not list key groups, and the broadcast "
                        "pattern's apply_to_keyed_state refuses it")
        expected = Counter((key, key_group_for_key(key, keyed_backend.max_parallelism)) for key in keys)
        got = Counter(found)
        assert got == expected, f"keys_and_key_groups('v') gave {sum(got.values())} pairs, {len(got - expected)} of " \
                                f"them unexpected (e.g. {list(got - expected)[:3]}), {len(expected - got)} missing"
        assert list(keyed_backend.keys_and_key_groups("no-such-state") or ()) == []

    def test_keys_while_keys_are_changed(self, keyed_backend: KeyedStateBackend) -> None:
        """State may be changed while iterating ``keys()`` (Flink's ``applyToAllKeys`` pattern): the
        iteration yields the keys as they were when it began, each once, whatever is cleared or
        added meanwhile (a key added to a key group not yet reached is not yielded)."""
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        keys = list(range(1_000))
        for key in keys:
            set_key(keyed_backend, key)
            state.update(key)
        seen = []
        for key in keyed_backend.keys("v"):
            seen.append(key)
            set_key(keyed_backend, key)
            state.clear()
            set_key(keyed_backend, key + 10_000)  # a new key, in whichever key group it falls
            state.update(key)
        assert sorted(seen) == keys, \
            f"keys() yielded {len(seen)} keys ({len(set(seen))} distinct) while keys were moved, expected the " \
            f"{len(keys)} there were when it began; not among them: {sorted(set(seen) - set(keys))[:5]}"
        assert_keys(keyed_backend, "v", [key + 10_000 for key in keys])

    def test_key_that_does_not_serialize_is_a_clear_error_and_leaves_other_keys(
            self, keyed_backend: KeyedStateBackend) -> None:
        """A key the key serializer rejects fails with SerializationError when it is made current or,
        at the latest, when its state is read or written (a backend may serialize keys lazily, or
        never, as the heap backend until a snapshot); the next key works as before."""
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        set_key(keyed_backend, "good")
        state.update(1)
        try:
            keyed_backend.set_current_key(threading.Lock(), keyed_backend.key_group_range.start)
            state.update(2)
            got = state.value()
        except SerializationError:
            pass
        except Exception as exc:  # noqa: BLE001 - the point is the error type
            pytest.fail(f"a key that does not serialize raised {type(exc).__name__}: {exc}; expected statekit's "
                        f"SerializationError")
        else:  # no error yet: the write was kept, and the snapshot holding it is where it fails
            assert got == 2, f"a key that does not serialize raised no error and lost its write: value() reads {got!r}"
            with expect_error(SerializationError, "a key that does not serialize raised no error, so a snapshot "
                                                  "holding its state must fail with statekit's SerializationError"):
                keyed_backend.snapshot(1).write(InlineStreams())
            state.clear()
        set_key(keyed_backend, "good")
        assert state.value() == 1, f"after a key that does not serialize, key 'good' reads {state.value()!r}"
        state.update(3)
        assert state.value() == 3, f"after a key that does not serialize, key 'good' reads {state.value()!r} after 3"
