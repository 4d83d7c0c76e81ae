"""The state a user function sees. Semantics follow Flink's state interfaces.

Every access is scoped to the backend's current key and the state's current namespace.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, Iterable, Iterator, Mapping, TypeVar

V = TypeVar("V")
K = TypeVar("K")
IN = TypeVar("IN")
OUT = TypeVar("OUT")

#: The namespace of state that is not scoped by a window or similar.
VOID_NAMESPACE = None


class State(ABC):
    @abstractmethod
    def clear(self) -> None:
        """Remove the value of the current key and namespace."""

    @abstractmethod
    def set_current_namespace(self, namespace: Any) -> None:
        """Scope further accesses to ``namespace`` (``VOID_NAMESPACE`` by default)."""


class ValueState(State, Generic[V]):
    @abstractmethod
    def value(self) -> V | None:
        """The value, or the descriptor's default when there is none."""

    @abstractmethod
    def update(self, value: V | None) -> None:
        """Set the value; ``None`` clears it."""


class ListState(State, Generic[V]):
    @abstractmethod
    def get(self) -> list[V]:
        """The elements in insertion order; an empty list when there are none."""

    @abstractmethod
    def add(self, value: V) -> None:
        """Append one element; ``None`` is an error."""

    @abstractmethod
    def add_all(self, values: Iterable[V]) -> None:
        """Append elements; a ``None`` element, or ``None`` instead of an iterable, is an error and
        nothing is appended."""

    @abstractmethod
    def update(self, values: Iterable[V] | None) -> None:
        """Replace all elements; an empty iterable or ``None`` clears."""


class MapState(State, Generic[K, V]):
    """A map per key. Iteration reflects the map as it was when the iteration began: the
    map may be modified while iterating."""

    @abstractmethod
    def get(self, user_key: K) -> V | None: ...

    @abstractmethod
    def put(self, user_key: K, value: V) -> None: ...

    @abstractmethod
    def put_all(self, entries: Mapping[K, V]) -> None: ...

    @abstractmethod
    def remove(self, user_key: K) -> None: ...

    @abstractmethod
    def contains(self, user_key: K) -> bool: ...

    @abstractmethod
    def items(self) -> Iterator[tuple[K, V]]: ...

    def keys(self) -> Iterator[K]:
        return (k for k, _ in self.items())

    def values(self) -> Iterator[V]:
        return (v for _, v in self.items())

    def is_empty(self) -> bool:
        return next(iter(self.items()), None) is None

    def __iter__(self) -> Iterator[K]:
        return self.keys()


class AppendingState(State, Generic[IN, OUT]):
    @abstractmethod
    def get(self) -> OUT | None:
        """The current result, or ``None`` when nothing was added."""

    @abstractmethod
    def add(self, value: IN) -> None: ...


class ReducingState(AppendingState[V, V]):
    """Keeps ``reduce(reduce(a, b), c)`` of everything added."""


class AggregatingState(AppendingState[IN, OUT]):
    """Keeps an accumulator; ``get()`` returns ``get_result(accumulator)``."""


class BroadcastState(Generic[K, V]):
    """Operator state: a map identical on every subtask."""

    @abstractmethod
    def get(self, key: K) -> V | None: ...

    @abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abstractmethod
    def remove(self, key: K) -> None: ...

    @abstractmethod
    def contains(self, key: K) -> bool: ...

    @abstractmethod
    def items(self) -> Iterator[tuple[K, V]]: ...

    @abstractmethod
    def clear(self) -> None: ...
