"""Conformance level 1: state semantics of every keyed state kind (Flink's state interfaces).

A plugin subclasses ``StateSemantics`` (or the single mixins) and overrides the
``state_backend`` fixture::

    class TestMyBackendSemantics(StateSemantics):
        @pytest.fixture
        def state_backend(self):
            return MyStateBackend()

Every test works on a fresh ``keyed_backend`` that owns all key groups. The suite is shipped
in the wheel, so pytest does not rewrite its asserts: every assert carries its own message.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import operator
import threading
from collections import Counter
from typing import Any, Callable, Iterable, Sequence

import pytest

from statekit.conformance_tests.base import MAX_PARALLELISM, BackendTestBase, set_key
from statekit.serializers import PickleSerializer
from statekit.spi import (
    AggregateFunction, AggregatingState, AggregatingStateDescriptor, CapabilityError,
    KeyedStateBackend, ListState, ListStateDescriptor, MapState, MapStateDescriptor,
    ReducingState, ReducingStateDescriptor, SerializationError, StateAccessError, StateBackend,
    StateDescriptor, StateTtlConfig, ValueState, ValueStateDescriptor, VOID_NAMESPACE,
    key_group_for_key,
)

# --------------------------------------------------------------------------------------------
# test data and helpers


#: Namespaces chosen so that naive encodings collide: void vs "", a string and its extension,
#: ints whose little-endian bytes share a prefix, a tuple (window-like).
NAMESPACES: tuple[Any, ...] = (VOID_NAMESPACE, "", "w", "w1", 0, 1, 256, ("window", 0, 10))

#: Values of many Python types, including falsy ones that must not be mistaken for "absent".
ROUND_TRIP_VALUES: tuple[Any, ...] = (
    0, 1, -1, 2 ** 62, -(2 ** 63), 2 ** 100, 0.0, 3.25, -1.5e300, float("inf"),
    "", "plain", "ünïcödé ✓ \x00 nul", b"", b"\x00\xff\x00", bytearray(b"ba"),
    True, False, [], {}, (), [1, [2, [3, []]]], (1, "x", None, (2.5,)),
    {"a": {"b": [1, (2, 3)], "c": None}, 7: b"seven"}, {1, 2, 3}, frozenset({"x"}),
    _dt.date(2024, 2, 29), _dt.datetime(2024, 1, 1, 12, 30, tzinfo=_dt.timezone.utc),
    decimal.Decimal("1.10"), complex(1, -2),
)


def mixed_keys(n: int) -> list[Any]:
    """``n`` distinct keys: strings, (negative and large) ints and two-column tuples."""
    keys: list[Any] = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            keys.append(f"user-{i}")
        elif kind == 1:
            keys.append(i * 7919 - 1_000_000 if i % 2 else i * 2 ** 40)
        else:
            keys.append((f"t{i}", i))
    return keys


def _same_group_as(base: Any, candidates: Iterable[Any]) -> Any:
    """The first candidate whose key group equals ``base``'s (deterministic: xxhash is fixed)."""
    target = key_group_for_key(base, MAX_PARALLELISM)
    for candidate in candidates:
        if candidate != base and key_group_for_key(candidate, MAX_PARALLELISM) == target:
            return candidate
    raise AssertionError(f"test data: no candidate shares key group {target} with {base!r}")


def prefix_keys() -> list[Any]:
    """Keys whose naive byte encodings are prefixes of each other, several in one key group.

    "a" and b"a" hash to the same key group (same bytes); "a<n>" / 1+256*n are picked to land in
    that group too, so a layout that is not prefix-free shows up as bleeding state.
    """
    keys: list[Any] = [
        "a", "ab", "", b"a", b"ab", 1, 256, 0, -1, ("a", 1), ("a", 1, 2), ("ab", 1),
        _same_group_as("a", (f"a{i}" for i in range(100_000))),
        _same_group_as("", (f"{i}" for i in range(100_000))),
        _same_group_as(1, (1 + 256 * i for i in range(1, 100_000))),
    ]
    assert len(set(map(repr, keys))) == len(keys), f"test data: duplicate keys in {keys!r}"
    return keys


def key_set(backend: KeyedStateBackend, name: str, namespace: Any = VOID_NAMESPACE) -> Counter:
    """``backend.keys(name, namespace)`` as a multiset (order is unspecified)."""
    return Counter(backend.keys(name, namespace))


def assert_keys(backend: KeyedStateBackend, name: str, expected: Iterable[Any],
                namespace: Any = VOID_NAMESPACE) -> None:
    """``backend.keys`` returns exactly ``expected``, each once."""
    got = key_set(backend, name, namespace)
    want = Counter(expected)
    if got != want:
        dupes = sorted((repr(k) for k, c in got.items() if c > 1))[:10]
        raise AssertionError(
            f"backend.keys({name!r}, {namespace!r}) returned {sum(got.values())} keys "
            f"({len(got)} distinct), expected {len(want)}; missing: {sorted(map(repr, want - got))[:10]}, "
            f"unexpected: {sorted(map(repr, got - want))[:10]}, duplicated: {dupes}")


def typed_state(backend: KeyedStateBackend, descriptor: StateDescriptor, kind: type) -> Any:
    """``backend.get_state(descriptor)``, checked to implement the state interface ``kind``."""
    state = backend.get_state(descriptor)
    assert isinstance(state, kind), \
        f"get_state({descriptor!r}) returned {type(state).__name__}, not a {kind.__name__}"
    return state


def value_state(backend: KeyedStateBackend, descriptor: ValueStateDescriptor) -> ValueState:
    return typed_state(backend, descriptor, ValueState)


def list_state(backend: KeyedStateBackend, descriptor: ListStateDescriptor) -> ListState:
    return typed_state(backend, descriptor, ListState)


def map_state(backend: KeyedStateBackend, descriptor: MapStateDescriptor) -> MapState:
    return typed_state(backend, descriptor, MapState)


def reducing_state(backend: KeyedStateBackend, descriptor: ReducingStateDescriptor) -> ReducingState:
    return typed_state(backend, descriptor, ReducingState)


def aggregating_state(backend: KeyedStateBackend, descriptor: AggregatingStateDescriptor) -> AggregatingState:
    return typed_state(backend, descriptor, AggregatingState)


def concat(a: str, b: str) -> str:
    """A reduce function whose result shows argument order."""
    return a + b


class Average(AggregateFunction[float, tuple[float, int], float]):
    """Average with an immutable ``(sum, count)`` accumulator."""

    def create_accumulator(self) -> tuple[float, int]:
        return (0.0, 0)

    def add(self, value: float, accumulator: tuple[float, int]) -> tuple[float, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[float, int]) -> float:
        return accumulator[0] / accumulator[1]


class MutableAverage(AggregateFunction[float, list, float]):
    """Average whose accumulator is a list mutated in place: a shared accumulator would leak."""

    def create_accumulator(self) -> list:
        return [0.0, 0]

    def add(self, value: float, accumulator: list) -> list:
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator: list) -> float:
        return accumulator[0] / accumulator[1]


class Collect(AggregateFunction[Any, tuple, list]):
    """Result differs from the accumulator, so returning the accumulator is detectable."""

    def create_accumulator(self) -> tuple:
        return ()

    def add(self, value: Any, accumulator: tuple) -> tuple:
        return accumulator + (value,)

    def get_result(self, accumulator: tuple) -> list:
        return ["result", *accumulator]


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
        """Many Python types come back equal and of the same type (default pickle serializer)."""
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
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

    def test_value_unserializable_value_raises_statekit_error(self, keyed_backend: KeyedStateBackend) -> None:
        """A backend that serializes in update() raises SerializationError and keeps the old value.

        A heap backend may defer serialization to the snapshot; that path belongs to the
        snapshot level, so here only an eager failure is checked.
        """
        for bad in (lambda x: x, threading.Lock()):
            with pytest.raises(SerializationError):
                PickleSerializer().serialize(bad)
        state = value_state(keyed_backend, ValueStateDescriptor("v"))
        set_key(keyed_backend, "k")
        for bad in (lambda x: x, threading.Lock()):
            state.update("old")
            try:
                state.update(bad)
            except SerializationError:
                assert state.value() == "old", \
                    f"a failed update({type(bad).__name__}) left value() = {state.value()!r}, expected 'old'"
            except Exception as exc:  # noqa: BLE001 - the point is the error type
                pytest.fail(f"update({type(bad).__name__}) raised {type(exc).__name__}: {exc}; "
                            f"expected statekit's SerializationError (or no error until the snapshot)")


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

    def test_list_update_replaces(self, keyed_backend: KeyedStateBackend) -> None:
        state = list_state(keyed_backend, ListStateDescriptor("l"))
        set_key(keyed_backend, "k")
        state.add_all([1, 2, 3])
        state.update([9, 8])
        assert state.get() == [9, 8], f"after update([9, 8]) list reads {state.get()!r}"
        state.update(v for v in "ab")
        assert state.get() == ["a", "b"], f"after update(generator) list reads {state.get()!r}"

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


# --------------------------------------------------------------------------------------------
# MapState


class MapStateSemantics(BackendTestBase):
    """``MapState``: CRUD, views, snapshot iteration under mutation, prefix-free layout."""

    def test_map_get_missing_is_none(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        assert state.get("missing") is None, f"get of a missing user key read {state.get('missing')!r}"
        state.put("present", 1)
        assert state.get("missing") is None, \
            f"get of a missing user key read {state.get('missing')!r} when other keys exist"

    def test_map_put_get_contains_remove(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        assert not state.contains("a"), "contains('a') is true on an empty map"
        state.put("a", 1)
        assert state.get("a") == 1 and state.contains("a"), \
            f"after put('a', 1): get={state.get('a')!r} contains={state.contains('a')!r}"
        state.put("a", 2)
        assert state.get("a") == 2, f"put of an existing key did not overwrite: get('a') = {state.get('a')!r}"
        state.put("zero", 0)
        assert state.contains("zero") and state.get("zero") == 0, "a falsy value 0 was not stored"
        state.remove("a")
        assert state.get("a") is None and not state.contains("a"), \
            f"after remove('a'): get={state.get('a')!r} contains={state.contains('a')!r}"
        state.remove("a")  # removing a missing key is a no-op
        state.remove("never")
        assert dict(state.items()) == {"zero": 0}, f"map is {dict(state.items())!r}, expected {{'zero': 0}}"

    def test_map_put_all(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put("a", 0)
        state.put_all({"a": 1, "b": 2, "c": 3})
        state.put_all({})
        assert dict(state.items()) == {"a": 1, "b": 2, "c": 3}, f"after put_all map is {dict(state.items())!r}"

    def test_map_put_all_empty_creates_no_state(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({})
        assert state.is_empty(), "put_all({}) made the map non-empty"
        assert_keys(keyed_backend, "m", [])

    def test_map_views(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        assert state.is_empty(), "a fresh map is not empty"
        assert list(state.items()) == [] and list(state.keys()) == [] and list(state.values()) == [] \
            and list(state) == [], "a fresh map iterates entries"
        entries = {"x": 1, "y": [2], "z": {"n": 3}}
        state.put_all(entries)
        assert not state.is_empty(), "is_empty() is true after put_all"
        items = list(state.items())
        assert all(isinstance(it, tuple) and len(it) == 2 for it in items), f"items() yielded {items!r}"
        assert dict(items) == entries and len(items) == 3, f"items() is {items!r}"
        assert sorted(state.keys()) == ["x", "y", "z"], f"keys() is {list(state.keys())!r}"
        assert sorted(map(repr, state.values())) == sorted(map(repr, entries.values())), \
            f"values() is {list(state.values())!r}"
        assert sorted(state) == ["x", "y", "z"], f"iter() is {list(state)!r}"
        keys, values = list(state.keys()), list(state.values())
        assert dict(zip(keys, values)) == entries, \
            f"keys() and values() are not in the same order: {keys!r} / {values!r}"

    def test_map_clear(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({"a": 1, "b": 2})
        state.clear()
        assert state.is_empty() and list(state.items()) == [], f"after clear() map is {dict(state.items())!r}"
        assert state.get("a") is None and not state.contains("a"), "after clear() get('a') still finds a value"
        assert_keys(keyed_backend, "m", [])
        state.put("c", 3)
        assert dict(state.items()) == {"c": 3}, f"put after clear() gives {dict(state.items())!r}"

    def test_map_removing_last_entry_removes_key(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put("only", 1)
        state.remove("only")
        assert state.is_empty(), "map not empty after removing its only entry"
        assert_keys(keyed_backend, "m", [])

    def test_map_user_keys_of_several_types(self, keyed_backend: KeyedStateBackend) -> None:
        """User keys that are equal-looking but distinct ("1", 1, (1,), b"1") stay distinct."""
        entries = {"1": "str", 1: "int", (1,): "tuple", b"1": "bytes", 1.5: "float", "": "empty",
                   ("a", (2, "b")): "nested", -(2 ** 70): "bigint", 256: "int256", "a": "a", "ab": "ab"}
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        for user_key, value in entries.items():
            state.put(user_key, value)
        for user_key, value in entries.items():
            assert state.get(user_key) == value, \
                f"get({user_key!r}) is {state.get(user_key)!r}, expected {value!r}"
        got = list(state.items())
        assert len(got) == len(entries) and dict(got) == entries, \
            f"items() is {got!r}, expected {entries!r}"
        assert {type(k) for k, _ in got} == {type(k) for k in entries}, \
            f"user-key types changed in iteration: {sorted({type(k).__name__ for k, _ in got})}"
        state.remove("a")
        assert state.get("ab") == "ab", "remove('a') removed user key 'ab'"
        state.remove(1)
        assert state.get(256) == "int256" and state.get("1") == "str" and state.get(b"1") == "bytes", \
            "remove(1) removed another user key"

    def test_map_iteration_snapshot_while_mutating(self, keyed_backend: KeyedStateBackend) -> None:
        """While iterating items(), put/remove/overwrite do not raise and the iteration yields the
        map as it was when it started."""
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        original = {f"k{i}": i for i in range(100)}
        state.put_all(original)
        iterator = iter(state.items())
        seen = [next(iterator)]
        for i in range(100):
            state.put(f"new{i}", -i)
        for i in range(0, 100, 2):
            state.remove(f"k{i}")
        for i in range(1, 100, 4):
            state.put(f"k{i}", "overwritten")
        seen.extend(iterator)
        assert len(seen) == len(original) and dict(seen) == original, \
            f"iteration under mutation yielded {len(seen)} entries; missing " \
            f"{sorted(set(original) - dict(seen).keys())[:5]}, unexpected " \
            f"{sorted(dict(seen).keys() - set(original))[:5]}, changed values " \
            f"{[(k, v) for k, v in seen if original.get(k) != v][:5]}"
        want = {k: ("overwritten" if (int(k[1:]) % 4 == 1) else v)
                for k, v in original.items() if int(k[1:]) % 2}
        want.update({f"new{i}": -i for i in range(100)})
        assert dict(state.items()) == want, "after the iteration the map does not reflect the mutations"

    def test_map_remove_all_while_iterating(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({i: str(i) for i in range(50)})
        removed = []
        for user_key in state:
            state.remove(user_key)
            removed.append(user_key)
        assert sorted(removed) == list(range(50)), f"iteration while removing visited {sorted(removed)!r}"
        assert state.is_empty(), f"map not empty after removing every key: {dict(state.items())!r}"
        assert_keys(keyed_backend, "m", [])

    def test_map_put_while_iterating_terminates(self, keyed_backend: KeyedStateBackend) -> None:
        """Adding an entry per visited entry must neither raise nor extend the iteration."""
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({f"k{i}": i for i in range(20)})
        visited = 0
        for user_key, value in state.items():
            visited += 1
            if visited > 40:
                raise AssertionError("iteration saw entries put during the iteration (did not stop after 40)")
            state.put(user_key + "x", value)
        assert visited == 20, f"iteration visited {visited} entries, expected the 20 present at its start"
        assert len(list(state.items())) == 40, f"map has {len(list(state.items()))} entries, expected 40"

    def test_map_iteration_sees_only_current_key_and_namespace(self, keyed_backend: KeyedStateBackend) -> None:
        """Prefix-free layout: entries of keys/namespaces that may share byte prefixes never bleed."""
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        keys = prefix_keys()
        namespaces = NAMESPACES

        def entries(ki: int, ni: int) -> dict[Any, Any]:
            return {"a": (ki, ni), "ab": (ki, ni, "ab"), ki: ni, (ki, ni): "t"}

        for ki, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ni, ns in enumerate(namespaces):
                state.set_current_namespace(ns)
                state.put_all(entries(ki, ni))
        for ki, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ni, ns in enumerate(namespaces):
                state.set_current_namespace(ns)
                got = list(state.items())
                assert len(got) == 4 and dict(got) == entries(ki, ni), \
                    f"key {key!r} namespace {ns!r} iterates {got!r}, expected {entries(ki, ni)!r}"
        set_key(keyed_backend, "a")
        state.set_current_namespace("w")
        state.clear()
        for ki, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ni, ns in enumerate(namespaces):
                state.set_current_namespace(ns)
                want = {} if (key == "a" and ns == "w") else entries(ki, ni)
                got = dict(state.items())
                assert got == want, \
                    f"after clearing key 'a' namespace 'w', key {key!r} namespace {ns!r} iterates {got!r}"
        assert_keys(keyed_backend, "m", [k for k in keys if k != "a"], "w")
        assert_keys(keyed_backend, "m", keys, "w1")

    def test_map_ten_thousand_entries(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "big")
        entries = {i: f"v{i}" for i in range(10_000)}
        state.put_all(entries)
        set_key(keyed_backend, "small")
        state.put("only", 1)
        set_key(keyed_backend, "big")
        got = list(state.items())
        assert len(got) == 10_000, f"a 10000-entry map iterated {len(got)} entries"
        assert dict(got) == entries, "a 10000-entry map iterated wrong entries"
        set_key(keyed_backend, "small")
        assert dict(state.items()) == {"only": 1}, f"key 'small' iterates {dict(state.items())!r}"

    def test_map_key_isolation(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        keys = mixed_keys(300)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            state.put("shared-user-key", i)
            state.put(i, key)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            got = dict(state.items())
            assert got == {"shared-user-key": i, i: key}, f"key {key!r} iterates {got!r}"
        assert_keys(keyed_backend, "m", keys)


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


# --------------------------------------------------------------------------------------------
# TTL


def _ttl_descriptors() -> list[StateDescriptor]:
    ttl = StateTtlConfig(ttl_seconds=60.0)
    return [
        ValueStateDescriptor("ttl", ttl=ttl),
        ListStateDescriptor("ttl", ttl=ttl),
        MapStateDescriptor("ttl", ttl=ttl),
        ReducingStateDescriptor("ttl", reduce_function=operator.add, ttl=ttl),
        AggregatingStateDescriptor("ttl", aggregate_function=Average(), ttl=ttl),
    ]


class TtlSemantics(BackendTestBase):
    """TTL descriptors: rejected by backends that do not declare the ``ttl`` capability."""

    @pytest.mark.parametrize("descriptor", _ttl_descriptors(), ids=lambda d: d.kind.value)
    def test_ttl_without_capability_raises(self, state_backend: StateBackend,
                                           keyed_backend: KeyedStateBackend,
                                           descriptor: StateDescriptor) -> None:
        if state_backend.capabilities.ttl:
            pytest.skip(f"{type(state_backend).__name__} declares the 'ttl' capability; "
                        f"TTL expiry is tested by the TTL level, not here")
        with pytest.raises(CapabilityError):
            keyed_backend.get_state(descriptor)


# --------------------------------------------------------------------------------------------


class StateSemantics(ValueStateSemantics, ListStateSemantics, MapStateSemantics,
                     ReducingStateSemantics, AggregatingStateSemantics, KeyIterationSemantics,
                     ValueCopySemantics, MapUserKeyEquality, TtlSemantics):
    """Every state-semantics mixin: subclass this one class and override ``state_backend``."""


__all__ = ["AggregatingStateSemantics", "KeyIterationSemantics", "ListStateSemantics",
           "MapStateSemantics", "MapUserKeyEquality", "ReducingStateSemantics", "StateSemantics",
           "TtlSemantics", "ValueCopySemantics", "ValueStateSemantics"]
