"""Test data and helpers shared by the state-semantics mixins."""
from __future__ import annotations

import datetime as _dt
import decimal
from collections import Counter
from typing import Any, Iterable

from statekit.conformance_tests.base import MAX_PARALLELISM
from statekit.spi import (
    AggregateFunction, AggregatingState, AggregatingStateDescriptor, KeyedStateBackend, ListState,
    ListStateDescriptor, MapState, MapStateDescriptor, ReducingState, ReducingStateDescriptor, StateDescriptor,
    ValueState, ValueStateDescriptor, VOID_NAMESPACE, key_group_for_key,
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
