"""Keyed state read and written for many keys in one call: the state a ``KeyedVectorFunction``
uses (``KeyedContext.get_bulk_state``).

A bulk call gets a ``KeyBatch`` (keys and their key groups, aligned) and works on each key in
order, in the state's current namespace, exactly as a loop of per-key calls would: a key that
occurs twice is updated twice, a value written is read back by later calls of either kind, and
a snapshot holds it. What it saves is the per-key Python call chain: backends implement it with
one pass over their structures (heap), batched writes (RocksDB) or one cursor (LMDB). Every
backend has it: ``PerKeyBulkState`` and its subclasses implement it on the per-key API, which is
what a backend without a bulk implementation of its own (or a state with TTL) uses. A bulk call
leaves the backend's current key unspecified.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Sequence, TypeVar

from statekit.spi.errors import StateAccessError
from statekit.spi.key_groups import key_group_for_key
from statekit.spi.state import ReducingState

if TYPE_CHECKING:
    from statekit.spi.backend import KeyedStateBackend
    from statekit.spi.state import AppendingState, ListState, MapState, State, ValueState

V = TypeVar("V")
K = TypeVar("K")
IN = TypeVar("IN")
OUT = TypeVar("OUT")
T = TypeVar("T")


class KeyBatch:
    """Keys and their key groups, aligned (``key_groups[i]`` is the key group of ``keys[i]``)."""

    def __init__(self, keys: Sequence[Any], key_groups: Sequence[int]) -> None:
        if len(keys) != len(key_groups):
            raise StateAccessError(f"a key batch needs one key group per key: {len(keys)} keys, "
                                   f"{len(key_groups)} key groups")
        self.keys = keys
        self.key_groups = key_groups
        self._derived: dict[Any, Any] = {}

    def derived(self, token: Any, compute: Callable[[], T]) -> T:
        """What ``compute`` derives from this batch (a backend's stored-key prefixes, say), computed
        once per ``token``: states read and written with one batch share it. A batch is not
        changed after it is made."""
        try:
            return self._derived[token]
        except KeyError:
            value = self._derived[token] = compute()
            return value

    @classmethod
    def of(cls, keys: Sequence[Any], max_parallelism: int) -> "KeyBatch":
        """The batch of ``keys``, their key groups computed as the engines do (``spi.key_groups``)."""
        return cls(keys, [key_group_for_key(key, max_parallelism) for key in keys])

    def __len__(self) -> int:
        return len(self.keys)


def check_aligned(keys: KeyBatch, values: Sequence[Any], what: str) -> None:
    """A ``StateAccessError`` unless there is one value per key."""
    if len(values) != len(keys.keys):
        raise StateAccessError(f"{what}: {len(values)} values for {len(keys.keys)} keys; give exactly one per key "
                               f"(None where a key has nothing)")


class BulkState(ABC):
    @abstractmethod
    def set_current_namespace(self, namespace: Any) -> None:
        """Scope further bulk accesses to ``namespace``."""

    @abstractmethod
    def clear_many(self, keys: KeyBatch) -> None:
        """Remove the value of every key."""


class BulkValueState(BulkState, Generic[V]):
    @abstractmethod
    def get_many(self, keys: KeyBatch) -> list[V | None]:
        """Each key's value, or the descriptor's default (a fresh copy) where it has none."""

    @abstractmethod
    def update_many(self, keys: KeyBatch, values: Sequence[V | None]) -> None:
        """Set each key's value; ``None`` clears it."""


class BulkListState(BulkState, Generic[V]):
    @abstractmethod
    def get_many(self, keys: KeyBatch) -> list[list[V]]:
        """Each key's elements in insertion order (an empty list where there are none)."""

    @abstractmethod
    def add_many(self, keys: KeyBatch, elements: Sequence[Iterable[V]]) -> None:
        """Append each key's elements; a ``None`` element is an error and nothing is appended."""

    @abstractmethod
    def update_many(self, keys: KeyBatch, elements: Sequence[Iterable[V] | None]) -> None:
        """Replace each key's elements; an empty iterable or ``None`` clears."""


class BulkMapState(BulkState, Generic[K, V]):
    """One (key, user key) entry per position: ``keys[i]`` with ``user_keys[i]``."""

    @abstractmethod
    def get_many(self, keys: KeyBatch, user_keys: Sequence[K]) -> list[V | None]: ...

    @abstractmethod
    def put_many(self, keys: KeyBatch, user_keys: Sequence[K], values: Sequence[V]) -> None: ...

    @abstractmethod
    def remove_many(self, keys: KeyBatch, user_keys: Sequence[K]) -> None: ...


class BulkAppendingState(BulkState, Generic[IN, OUT]):
    @abstractmethod
    def get_many(self, keys: KeyBatch) -> list[OUT | None]:
        """Each key's result, or ``None`` where nothing was added."""

    @abstractmethod
    def add_many(self, keys: KeyBatch, values: Sequence[IN]) -> None:
        """Add one value to each key (reduce or aggregate it in); ``None`` is an error for
        reducing state and nothing is added."""


class BulkReducingState(BulkAppendingState[V, V]):
    pass


class BulkAggregatingState(BulkAppendingState[IN, OUT]):
    pass


# --- every backend's implementation on its per-key API


class PerKeyBulkState(BulkState):
    """Bulk access as a loop over the per-key state of ``backend``."""

    def __init__(self, backend: "KeyedStateBackend", state: "State") -> None:
        self._backend = backend
        self._state: Any = state

    def set_current_namespace(self, namespace: Any) -> None:
        self._state.set_current_namespace(namespace)

    def _each(self, keys: KeyBatch) -> Iterable[int]:
        set_key = self._backend.set_current_key
        for i, (key, key_group) in enumerate(zip(keys.keys, keys.key_groups)):
            set_key(key, key_group)
            yield i

    def clear_many(self, keys: KeyBatch) -> None:
        for _ in self._each(keys):
            self._state.clear()


class PerKeyBulkValueState(PerKeyBulkState, BulkValueState):
    _state: "ValueState"

    def get_many(self, keys: KeyBatch) -> list[Any]:
        value = self._state.value
        return [value() for _ in self._each(keys)]

    def update_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "ValueState.update_many")
        update = self._state.update
        for i in self._each(keys):
            update(values[i])


class PerKeyBulkListState(PerKeyBulkState, BulkListState):
    _state: "ListState"

    def get_many(self, keys: KeyBatch) -> list[list[Any]]:
        get = self._state.get
        return [get() for _ in self._each(keys)]

    def add_many(self, keys: KeyBatch, elements: Sequence[Iterable[Any]]) -> None:
        check_aligned(keys, elements, "ListState.add_many")
        checked = [check_elements(e, "ListState.add_many") for e in elements]
        add_all = self._state.add_all
        for i in self._each(keys):
            add_all(checked[i])

    def update_many(self, keys: KeyBatch, elements: Sequence[Iterable[Any] | None]) -> None:
        check_aligned(keys, elements, "ListState.update_many")
        checked = [check_elements(e, "ListState.update_many") for e in elements]
        update = self._state.update
        for i in self._each(keys):
            update(checked[i])


class PerKeyBulkMapState(PerKeyBulkState, BulkMapState):
    _state: "MapState"

    def get_many(self, keys: KeyBatch, user_keys: Sequence[Any]) -> list[Any]:
        check_aligned(keys, user_keys, "MapState.get_many")
        get = self._state.get
        return [get(user_keys[i]) for i in self._each(keys)]

    def put_many(self, keys: KeyBatch, user_keys: Sequence[Any], values: Sequence[Any]) -> None:
        check_aligned(keys, user_keys, "MapState.put_many")
        check_aligned(keys, values, "MapState.put_many")
        put = self._state.put
        for i in self._each(keys):
            put(user_keys[i], values[i])

    def remove_many(self, keys: KeyBatch, user_keys: Sequence[Any]) -> None:
        check_aligned(keys, user_keys, "MapState.remove_many")
        remove = self._state.remove
        for i in self._each(keys):
            remove(user_keys[i])


class PerKeyBulkAppendingState(PerKeyBulkState, BulkReducingState, BulkAggregatingState):
    _state: "AppendingState"

    def get_many(self, keys: KeyBatch) -> list[Any]:
        get = self._state.get
        return [get() for _ in self._each(keys)]

    def add_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "add_many")
        if isinstance(self._state, ReducingState):
            check_no_none(values, "ReducingState.add_many")
        add = self._state.add
        for i in self._each(keys):
            add(values[i])


def check_elements(elements: Iterable[Any] | None, what: str) -> list[Any]:
    """``elements`` as a list (None: none), or a ``StateAccessError`` if one is None (list state
    holds no None)."""
    listed = list(elements) if elements is not None else []
    if any(e is None for e in listed):
        raise StateAccessError(f"{what}: list state elements cannot be None; nothing was changed")
    return listed


def check_no_none(values: Sequence[Any], what: str) -> None:
    """A ``StateAccessError`` if a value is None (reducing state cannot add None)."""
    if any(v is None for v in values):
        raise StateAccessError(f"{what}: reducing state cannot add None; nothing was added")


def per_key_bulk_state(backend: "KeyedStateBackend", state: "State") -> BulkState:
    """The bulk form of ``state`` (any kind) as a loop over the per-key API."""
    from statekit.spi.state import AppendingState, ListState, MapState, ValueState

    for kind, bulk in ((ValueState, PerKeyBulkValueState), (ListState, PerKeyBulkListState),
                       (MapState, PerKeyBulkMapState), (AppendingState, PerKeyBulkAppendingState)):
        if isinstance(state, kind):
            return bulk(backend, state)
    raise StateAccessError(f"no bulk access for {type(state).__name__}")
