"""State semantics: ValueState."""
from __future__ import annotations

import operator
from typing import Any
import threading

import pytest

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.expect import expect_error
from statekit.conformance_tests.semantics.common import (
    NAMESPACES, ROUND_TRIP_VALUES, mixed_keys, prefix_keys, assert_keys, value_state, Average,
)
from statekit.serializers import BytesSerializer, PickleSerializer, StringSerializer
from statekit.spi import (
    AggregatingStateDescriptor, KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
    SerializationError, StateAccessError, StateDescriptor, StatekitError, ValueStateDescriptor, VOID_NAMESPACE,
    key_group_for_key,
)
from statekit.storage.inline import InlineStreams

# --------------------------------------------------------------------------------------------
# ValueState


class ValueStateSemantics(BackendTestBase):
    """``ValueState``: default, update, ``update(None)`` clears, key/namespace isolation."""

    def test_value_get_state_returns_value_state(self, keyed_backend: KeyedStateBackend) -> None:
        value_state(keyed_backend, ValueStateDescriptor("v"))

    def test_value_current_key_reflects_set_key(self, keyed_backend: KeyedStateBackend) -> None:
        for key in ("k", 42, ("a", 1)):
            set_key(keyed_backend, key)
            assert keyed_backend.current_key == key, \
                f"current_key is {keyed_backend.current_key!r} after set_key({key!r})"
            kg = key_group_for_key(key, keyed_backend.max_parallelism)
            assert keyed_backend.current_key_group == kg, \
                f"current_key_group is {keyed_backend.current_key_group} for key {key!r}, expected {kg}"

    def test_value_access_without_current_key_raises(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        with pytest.raises(StateAccessError):
            state.value()
        with pytest.raises(StateAccessError):
            state.update(1)

    def test_value_unset_reads_none_without_default(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        set_key(keyed_backend, "k")
        got = state.value()
        assert got is None, f"unset value with no default read {got!r}, expected None"

    def test_value_unset_reads_default(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v", default=17))
        for key in ("k", 1, ("x", 2)):
            set_key(keyed_backend, key)
            got = state.value()
            assert got == 17, f"unset value of key {key!r} read {got!r}, expected the default 17"

    def test_value_update_then_value(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v", default="dflt"))
        set_key(keyed_backend, "k")
        state.update("one")
        assert state.value() == "one", f"value() is {state.value()!r} after update('one')"
        state.update("two")
        assert state.value() == "two", f"value() is {state.value()!r} after update('two')"

    def test_value_update_none_clears(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v", default="dflt"))
        set_key(keyed_backend, "k")
        state.update("x")
        state.update(None)
        assert state.value() == "dflt", \
            f"value() is {state.value()!r} after update(None), expected the default 'dflt'"
        assert_keys(keyed_backend, "v", [])

    def test_value_clear(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        set_key(keyed_backend, "k")
        state.update(5)
        state.clear()
        assert state.value() is None, f"value() is {state.value()!r} after clear(), expected None"
        assert_keys(keyed_backend, "v", [])
        state.clear()  # clearing an absent value is a no-op
        assert state.value() is None, f"value() is {state.value()!r} after a second clear()"

    def test_value_falsy_values_are_stored(self, keyed_backend: KeyedStateBackend) -> None:
        """0, '', False, [] are values, not "absent": they must not read as the default."""
        state = value_state(keyed_backend, ValueStateDescriptor("v", default="DEFAULT"))
        set_key(keyed_backend, "k")
        for falsy in (0, 0.0, "", b"", False, [], {}, ()):
            state.update(falsy)
            got = state.value()
            assert got == falsy and type(got) is type(falsy), \
                f"after update({falsy!r}) value() is {got!r}, expected {falsy!r} (not the default)"
            assert_keys(keyed_backend, "v", ["k"])

    def test_value_values_round_trip(self, keyed_backend: KeyedStateBackend) -> None:
        """Many Python types come back equal and of the same type (under pickle, which writes them all)."""
        state = value_state(keyed_backend, ValueStateDescriptor("v", PickleSerializer()))
        keys = [("rt", i) for i in range(len(ROUND_TRIP_VALUES))]
        for key, value in zip(keys, ROUND_TRIP_VALUES):
            set_key(keyed_backend, key)
            state.update(value)
        for key, value in zip(keys, ROUND_TRIP_VALUES):
            set_key(keyed_backend, key)
            got = state.value()
            assert got == value and type(got) is type(value), \
                f"key {key!r}: stored {value!r} ({type(value).__name__}), read {got!r} ({type(got).__name__})"

    def test_value_nan_round_trips(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        set_key(keyed_backend, "k")
        state.update(float("nan"))
        got = state.value()
        assert isinstance(got, float) and got != got, f"stored NaN, read {got!r}"

    def test_value_mutable_default_does_not_leak_across_keys(self, keyed_backend: KeyedStateBackend) -> None:
        """Read-modify-write of a mutable default for key A must not change key B's default."""
        descriptor = ValueStateDescriptor("v", default=[])
        state = value_state(keyed_backend, descriptor)
        set_key(keyed_backend, "A")
        current = state.value()
        assert current == [], f"key 'A' unset read {current!r}, expected the default []"
        current.append("added-for-A")
        state.update(current)
        set_key(keyed_backend, "B")
        got_b = state.value()
        assert got_b == [], \
            f"key 'B' (never written) read {got_b!r} after key 'A' appended to its default; " \
            f"the default object is shared between keys (Flink hands out a copy of the default)"
        assert descriptor.default == [], \
            f"the descriptor's default was mutated to {descriptor.default!r}"
        set_key(keyed_backend, "A")
        assert state.value() == ["added-for-A"], f"key 'A' reads {state.value()!r}"

    def test_value_mutable_dict_default_does_not_leak(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v", default={"n": 0}))
        for i, key in enumerate(("A", "B", "C")):
            set_key(keyed_backend, key)
            current = state.value()
            assert current == {"n": 0}, \
                f"key {key!r} (never written) read {current!r}, expected the default {{'n': 0}}" \
                f" - earlier keys' updates leaked into the default"
            current["n"] += i + 1
            state.update(current)

    def test_value_key_isolation_many_keys(self, keyed_backend: KeyedStateBackend) -> None:
        """1000 keys (str, int, tuple) over (nearly) all key groups keep their own values."""
        keys = mixed_keys(1000)
        groups = {key_group_for_key(k, keyed_backend.max_parallelism) for k in keys}
        assert len(groups) >= 100, f"test data: only {len(groups)} key groups covered"
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            state.update(("value", i, key))
        for i, key in reversed(list(enumerate(keys))):
            set_key(keyed_backend, key)
            got = state.value()
            assert got == ("value", i, key), f"key {key!r} reads {got!r}, expected {('value', i, key)!r}"
        assert_keys(keyed_backend, "v", keys)

    def test_value_prefix_keys_do_not_bleed(self, keyed_backend: KeyedStateBackend) -> None:
        """Keys whose encodings may prefix each other ("a"/"ab", 1/256, ...) stay separate."""
        keys = prefix_keys()
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            state.update(i)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            assert state.value() == i, f"key {key!r} reads {state.value()!r}, expected {i}"
        set_key(keyed_backend, "a")
        state.clear()
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            want = None if key == "a" else i
            assert state.value() == want, \
                f"after clearing key 'a', key {key!r} reads {state.value()!r}, expected {want!r}"
        assert_keys(keyed_backend, "v", [k for k in keys if k != "a"])

    def test_value_namespaces_isolate(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v", default="dflt"))
        for key in ("k1", "k2"):
            set_key(keyed_backend, key)
            for i, ns in enumerate(NAMESPACES):
                state.set_current_namespace(ns)
                state.update((key, i))
        for key in ("k1", "k2"):
            set_key(keyed_backend, key)
            for i, ns in enumerate(NAMESPACES):
                state.set_current_namespace(ns)
                assert state.value() == (key, i), \
                    f"key {key!r} namespace {ns!r} reads {state.value()!r}, expected {(key, i)!r}"
        set_key(keyed_backend, "k1")
        state.set_current_namespace("w")
        state.clear()
        for i, ns in enumerate(NAMESPACES):
            state.set_current_namespace(ns)
            want = "dflt" if ns == "w" else ("k1", i)
            assert state.value() == want, \
                f"after clearing namespace 'w', namespace {ns!r} reads {state.value()!r}, expected {want!r}"
        state.set_current_namespace("never-written")
        assert state.value() == "dflt", \
            f"an unwritten namespace reads {state.value()!r}, expected the default"

    def test_value_void_namespace_is_default(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        set_key(keyed_backend, "k")
        state.update("in-void")
        state.set_current_namespace("other")
        assert state.value() is None, \
            f"namespace 'other' reads {state.value()!r}; a fresh state must start in VOID_NAMESPACE"
        state.set_current_namespace(VOID_NAMESPACE)
        assert state.value() == "in-void", \
            f"VOID_NAMESPACE reads {state.value()!r}, expected the value written before any namespace was set"
        assert_keys(keyed_backend, "v", ["k"])
        assert_keys(keyed_backend, "v", ["k"], VOID_NAMESPACE)
        assert_keys(keyed_backend, "v", [], "other")

    @pytest.mark.parametrize("serializer, namespace", [(StringSerializer(), ""), (BytesSerializer(), b"")],
                             ids=["string", "bytes"])
    def test_value_namespace_of_no_bytes_is_refused(self, keyed_backend: KeyedStateBackend, serializer: Any,
                                                    namespace: Any) -> None:
        """A namespace its serializer writes as no bytes would be stored (and snapshotted) as the void
        namespace: it is refused with StateAccessError, when set or at the latest when written, and the
        void namespace keeps its value."""
        state = keyed_backend.get_state(ValueStateDescriptor("v"), serializer)
        set_key(keyed_backend, "k")
        state.update("void")
        with pytest.raises(StateAccessError):
            state.set_current_namespace(namespace)
            state.update("empty")
        state.set_current_namespace(VOID_NAMESPACE)
        assert state.value() == "void", \
            f"after namespace {namespace!r} was refused, the void namespace reads {state.value()!r}, expected 'void'"
        assert_keys(keyed_backend, "v", [], namespace)

    def test_timer_namespace_of_no_bytes_is_refused(self, keyed_backend: KeyedStateBackend) -> None:
        """A timer in a namespace its serializer writes as no bytes is refused and leaves no timer."""
        queue = keyed_backend.create_timer_queue("_timers/no-bytes", StringSerializer())
        set_key(keyed_backend, "k")
        with pytest.raises(StateAccessError):
            queue.add(5, "")
        assert queue.peek_timestamp() is None, "a refused timer was left in the queue"

    def test_value_keys_per_namespace(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        for i in range(30):
            set_key(keyed_backend, i)
            state.set_current_namespace("w1" if i % 2 else "w2")
            state.update(i)
            if i % 3 == 0:
                state.set_current_namespace(VOID_NAMESPACE)
                state.update(i)
        assert_keys(keyed_backend, "v", [i for i in range(30) if i % 2], "w1")
        assert_keys(keyed_backend, "v", [i for i in range(30) if not i % 2], "w2")
        assert_keys(keyed_backend, "v", [i for i in range(30) if i % 3 == 0])
        assert_keys(keyed_backend, "v", [], "w")

    def test_value_keys_exclude_cleared(self, keyed_backend: KeyedStateBackend) -> None:
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        keys = mixed_keys(60)
        for key in keys:
            set_key(keyed_backend, key)
            state.update(1)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            if i % 3 == 0:
                state.clear()
            elif i % 3 == 1:
                state.update(None)
        assert_keys(keyed_backend, "v", keys[2::3])

    def test_value_states_with_different_names_are_independent(self, keyed_backend: KeyedStateBackend) -> None:
        a = value_state(keyed_backend, ValueStateDescriptor("s"))
        b = value_state(keyed_backend, ValueStateDescriptor("s1"))
        set_key(keyed_backend, "k")
        a.update("a")
        b.update("b")
        assert (a.value(), b.value()) == ("a", "b"), \
            f"states 's' and 's1' read {(a.value(), b.value())!r}, expected ('a', 'b')"
        a.clear()
        assert b.value() == "b", f"clearing state 's' changed state 's1' to {b.value()!r}"
        assert_keys(keyed_backend, "s", [])
        assert_keys(keyed_backend, "s1", ["k"])
        names = set(keyed_backend.state_names())
        assert {"s", "s1"} <= names, f"state_names() is {sorted(names)}, missing 's' or 's1'"

    def test_value_same_descriptor_same_data(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ValueStateDescriptor("v")
        first = value_state(keyed_backend, descriptor)
        set_key(keyed_backend, "k")
        first.update("x")
        again = value_state(keyed_backend, descriptor)
        assert again.value() == "x", f"a second get_state of the same descriptor reads {again.value()!r}"
        equal = value_state(keyed_backend, ValueStateDescriptor("v"))
        assert equal.value() == "x", f"get_state of an equal descriptor reads {equal.value()!r}"
        equal.update("y")
        assert first.value() == "y", f"the first state reads {first.value()!r} after the second wrote 'y'"

    @pytest.mark.parametrize("other", [
        ListStateDescriptor("taken"), MapStateDescriptor("taken"),
        ReducingStateDescriptor("taken", reduce_function=operator.add),
        AggregatingStateDescriptor("taken", aggregate_function=Average()),
    ], ids=lambda d: d.kind.value)
    def test_value_same_name_different_kind_raises(self, keyed_backend: KeyedStateBackend,
                                             other: StateDescriptor) -> None:
        value_state(keyed_backend, ValueStateDescriptor("taken"))
        with pytest.raises(StateAccessError):
            keyed_backend.get_state(other)

    def test_state_used_after_dispose_fails(self, keyed_backend: KeyedStateBackend) -> None:
        """After ``dispose()`` the state objects it handed out, ``keys()`` and ``snapshot()`` fail with a
        StatekitError: none reads state that is gone, loses a write or snapshots nothing without a word."""
        value = value_state(keyed_backend, ValueStateDescriptor("v"))
        mapped = keyed_backend.get_state(MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        value.update(1)
        mapped.put("a", 1)
        keyed_backend.dispose()
        uses = {"ValueState.value()": value.value, "ValueState.update()": lambda: value.update(2),
                "MapState.put()": lambda: mapped.put("b", 2), "MapState.items()": lambda: list(mapped.items()),
                "keys()": lambda: list(keyed_backend.keys("v")), "snapshot()": lambda: keyed_backend.snapshot(1)}
        for name, use in uses.items():
            try:
                result = use()
            except StatekitError:
                continue
            except Exception as exc:  # noqa: BLE001 - the point is the error type
                pytest.fail(f"{name} after dispose() raised {type(exc).__name__}: {exc}; expected a StatekitError")
            pytest.fail(f"{name} after dispose() returned {result!r}; expected a StatekitError")

    def test_value_unserializable_value_raises_statekit_error(self, keyed_backend: KeyedStateBackend) -> None:
        """A value the serializer rejects fails with SerializationError, in update() (keeping the
        old value) or, for a heap backend that defers serialization, in the snapshot that holds it.
        It is never dropped without an error: update() that does not raise has stored the value."""
        for bad in (lambda x: x, threading.Lock()):
            with pytest.raises(SerializationError):
                PickleSerializer().serialize(bad)
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        for i, bad in enumerate((lambda x: x, threading.Lock())):
            set_key(keyed_backend, ("k", i))
            state.update("old")
            try:
                state.update(bad)
            except SerializationError:
                assert state.value() == "old", \
                    f"a failed update({type(bad).__name__}) left value() = {state.value()!r}, expected 'old'"
                continue
            except Exception as exc:  # noqa: BLE001 - the point is the error type
                pytest.fail(f"update({type(bad).__name__}) raised {type(exc).__name__}: {exc}; "
                            f"expected statekit's SerializationError (or no error until the snapshot)")
            assert state.value() is not None and state.value() != "old", \
                f"update({type(bad).__name__}) raised no error and was not kept: value() reads {state.value()!r}"
            with expect_error(SerializationError, f"update({type(bad).__name__}) raised no error, so a snapshot "
                                                  f"holding the value must fail with statekit's SerializationError"):
                keyed_backend.snapshot(i + 1).write(InlineStreams())
            state.clear()
