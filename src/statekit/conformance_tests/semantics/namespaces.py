"""State semantics: a namespace is its serialized bytes (by the state's namespace serializer).

A byte store keys cells by those bytes, so every backend must: under a pickle namespace serializer,
``1``, ``numpy.int64(1)``, ``True`` and ``1.0`` are four namespaces although equal in Python, and
two NaNs, or two objects compared by identity, that serialize alike are one namespace although
unequal in Python. Then a backend switch
through a savepoint never merges or splits a namespace."""
from __future__ import annotations

from typing import Any

import numpy as np

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.bulk import batch
from statekit.conformance_tests.semantics.common import assert_keys
from statekit.serializers import MsgpackSerializer, PickleSerializer
from statekit.spi import KeyedStateBackend, ValueStateDescriptor
from statekit.spi.timers import TimerQueue

#: the namespace serializer of these tests: it writes every value below, each as its own bytes
NAMESPACES = PickleSerializer()
#: equal in Python, apart in bytes under ``NAMESPACES``
EQUAL_IN_PYTHON: tuple[Any, ...] = (1, np.int64(1), True, 1.0, (1,), (1.0,), 0.0, -0.0)


class IdentityTag:
    """Equal only to itself in Python; two tags of one name pickle alike."""

    def __init__(self, name: str) -> None:
        self.name = name


def described(namespace: Any) -> tuple[str, str]:
    """A namespace told apart from those equal to it in Python."""
    return type(namespace).__name__, repr(namespace)


def fired_namespaces(queue: TimerQueue, up_to: int) -> list[tuple[int, tuple[str, str]]]:
    """(timestamp, described namespace) of every timer the queue fires up to ``up_to``, in order."""
    fired = []
    while (timer := queue.poll(up_to)) is not None:
        fired.append((timer.timestamp, described(timer.namespace)))
    return fired


def serialized_alike() -> list[tuple[Any, Any]]:
    """Pairs of namespaces unequal in Python that pickle to the same bytes."""
    nan, other_nan = float("nan"), float("nan")
    assert nan is not other_nan, "test data: the two NaNs must be two objects"
    return [(nan, other_nan), (IdentityTag("w"), IdentityTag("w"))]


class NamespaceEquality(BackendTestBase):
    """Namespaces are one exactly when their serialized bytes are (module docstring)."""

    def test_namespaces_equal_in_python_stay_apart(self, keyed_backend: KeyedStateBackend) -> None:
        state = keyed_backend.get_state(ValueStateDescriptor("v"), NAMESPACES)
        for key in ("a", "b"):
            set_key(keyed_backend, key)
            for i, namespace in enumerate(EQUAL_IN_PYTHON):
                state.set_current_namespace(namespace)
                state.update((key, i))
        set_key(keyed_backend, "a")
        state.set_current_namespace(True)
        state.clear()
        for key in ("a", "b"):
            set_key(keyed_backend, key)
            for i, namespace in enumerate(EQUAL_IN_PYTHON):
                state.set_current_namespace(namespace)
                want = None if key == "a" and type(namespace) is bool else (key, i)
                assert state.value() == want, \
                    f"key {key!r} in namespace {described(namespace)} reads {state.value()!r}, expected {want!r}"
        for namespace in EQUAL_IN_PYTHON:
            assert_keys(keyed_backend, "v", ["b"] if type(namespace) is bool else ["a", "b"], namespace)

    def test_bulk_namespaces_equal_in_python_stay_apart(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ValueStateDescriptor("v")
        bulk, state = keyed_backend.get_bulk_state(descriptor, NAMESPACES), keyed_backend.get_state(descriptor, NAMESPACES)
        keys = batch(keyed_backend, ["a", "b"])
        for i, namespace in enumerate(EQUAL_IN_PYTHON):
            bulk.set_current_namespace(namespace)
            bulk.update_many(keys, [i, i])
        for i, namespace in enumerate(EQUAL_IN_PYTHON):
            bulk.set_current_namespace(namespace)
            assert bulk.get_many(keys) == [i, i], \
                f"bulk reads in namespace {described(namespace)} are {bulk.get_many(keys)!r}, expected {[i, i]!r}"
            state.set_current_namespace(namespace)
            set_key(keyed_backend, "b")
            assert state.value() == i, \
                f"per-key read in namespace {described(namespace)} after bulk writes is {state.value()!r}, not {i}"

    def test_namespaces_serialized_alike_are_one(self, keyed_backend: KeyedStateBackend) -> None:
        state = keyed_backend.get_state(ValueStateDescriptor("v"), NAMESPACES)
        set_key(keyed_backend, "k")
        for first, second in serialized_alike():
            state.set_current_namespace(first)
            state.update(first.__class__.__name__)
            state.set_current_namespace(second)
            assert state.value() == first.__class__.__name__, \
                f"namespace {second!r} reads {state.value()!r}: it serializes as {first!r} does, so it is that one"
            assert_keys(keyed_backend, "v", ["k"], second)
            state.clear()
            state.set_current_namespace(first)
            assert state.value() is None, \
                f"clearing namespace {second!r} left {first!r} (the same bytes) holding state"

    def test_namespace_python_cannot_hash(self, keyed_backend: KeyedStateBackend) -> None:
        """A list namespace (msgpack) is one namespace with every equal list, and another than the tuple."""
        state = keyed_backend.get_state(ValueStateDescriptor("v"), MsgpackSerializer())
        set_key(keyed_backend, "k")
        state.set_current_namespace([1, "w"])
        state.update("list")
        state.set_current_namespace([1, "w"])
        assert state.value() == "list", f"namespace [1, 'w'] reads {state.value()!r} where it wrote 'list'"
        state.set_current_namespace((1, "w"))
        assert state.value() is None, f"namespace (1, 'w') reads {state.value()!r}, the value of list [1, 'w']"
        assert_keys(keyed_backend, "v", ["k"], [1, "w"])

    def test_timer_namespaces_follow_their_bytes(self, keyed_backend: KeyedStateBackend) -> None:
        """Timers equal in Python but serialized apart are several timers, each firing with its own
        namespace; timers serialized alike are one (added once, removed by either)."""
        queue = keyed_backend.create_timer_queue("_timers/namespaces", NAMESPACES)
        set_key(keyed_backend, "k")
        for namespace in EQUAL_IN_PYTHON:
            queue.add(5, namespace)
        queue.remove(5, True)
        pairs = serialized_alike()
        for first, second in pairs:
            queue.add(6, first)
            queue.add(6, second)
        first, second = pairs[1]
        queue.add(7, first)
        queue.remove(7, second)
        fired = fired_namespaces(queue, 10)
        want = sorted((5, described(n)) for n in EQUAL_IN_PYTHON if type(n) is not bool)
        assert sorted(fired[:len(want)]) == want, \
            f"timers at 5 fired in namespaces {fired[:len(want)]}, expected {want}"
        alike = [timestamp for timestamp, _ in fired[len(want):]]
        assert alike == [6, 6], \
            f"timers in namespaces serialized alike fired at {alike}, expected one per pair at 6 (none at 7)"
