"""The five keyed state kinds on a heap ``StateTable``.

The per-key operations are the hot path of every keyed function: they read the key group's map
from the table's ``groups`` list directly (the list object is the table's for good; copy-on-write
replaces its items) and test ``type(value) in ATOMIC`` before calling ``detached``, so that the
common case costs no call beyond the dict operations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

from statekit.backends.common.registration import checked_list_elements
from statekit.backends.common.copies import ATOMIC, detached, detached_list
from statekit.spi.errors import StateAccessError
from statekit.spi.state import (
    AggregatingState, ListState, MapState, ReducingState, State, ValueState, VOID_NAMESPACE,
)

if TYPE_CHECKING:
    from statekit.backends.heap.backend import HeapKeyedStateBackend
    from statekit.backends.heap.state_table import StateTable


class HeapStateAccess:
    """The table and current namespace of a state, per-key or bulk."""

    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable") -> None:
        self._backend = backend
        self._table = table
        self._groups = table.groups
        self._name = table.registration.name
        self._namespace: Any = VOID_NAMESPACE  # as the table holds it (``copies.Namespaces``)
        self._namespaces = table.namespaces
        self._plain_namespaces = table.namespaces.plain

    def set_current_namespace(self, namespace: Any) -> None:
        if type(namespace) not in self._plain_namespaces:
            namespace = self._namespaces.held(namespace)
        self._namespace = namespace


class HeapState(HeapStateAccess, State):
    def _get(self) -> Any:
        backend = self._backend
        entries = self._groups[backend._index].get(self._namespace)
        return None if entries is None else entries.get(backend._key)

    def _entries_for_write(self) -> dict[Any, Any]:
        backend, table, namespace = self._backend, self._table, self._namespace
        index = backend._index
        group = self._groups[index] if table.owned[index] else table.writable(index)
        entries = group.get(namespace)  # fails first when there is no current key
        if entries is None:
            entries = group[namespace] = {}
        changelog = backend._changelog
        if changelog.enabled:
            changelog.dirty[index].add((self._name, backend._key, namespace))
        return entries

    def _private(self, value: Any) -> Any:
        """A copy of a held value for a function that may update it in place (reduce and aggregate
        functions commonly do): a pending snapshot may still hold the original even where its key
        group was copied already, since copy-on-write copies the key group's maps, not its values."""
        return value if type(value) in ATOMIC else detached(value)

    def _put(self, value: Any) -> None:
        self._entries_for_write()[self._backend._key] = value

    def clear(self) -> None:
        index = self._backend._index
        entries = self._table.groups[index].get(self._namespace)
        if entries is None or self._backend._key not in entries:
            return
        changelog = self._backend._changelog
        if changelog.enabled:
            changelog.dirty[index].add((self._name, self._backend._key, self._namespace))
        group = self._table.writable(index)
        entries = group[self._namespace]
        del entries[self._backend._key]
        if not entries:
            del group[self._namespace]


class HeapValueState(HeapState, ValueState):
    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable", default: Any) -> None:
        super().__init__(backend, table)
        self._default = default

    def value(self) -> Any:
        backend = self._backend
        entries = self._groups[backend._index].get(self._namespace)
        if entries is not None:
            value = entries.get(backend._key, entries)
            if value is not entries:
                return value if type(value) in ATOMIC else detached(value)
        default = self._default
        return default if type(default) in ATOMIC else detached(default)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        backend, table = self._backend, self._table
        index = backend._index
        group = self._groups[index] if table.owned[index] else table.writable(index)
        entries = group.get(self._namespace)
        if entries is None:
            entries = group[self._namespace] = {}
        entries[backend._key] = value if type(value) in ATOMIC else detached(value)  # _put, inlined
        changelog = backend._changelog
        if changelog.enabled:
            changelog.dirty[index].add((self._name, backend._key, self._namespace))


class HeapListState(HeapState, ListState):
    def get(self) -> list[Any]:
        backend = self._backend
        entries = self._groups[backend._index].get(self._namespace)
        values = None if entries is None else entries.get(backend._key)
        if not values:
            return []
        return list(values) if ATOMIC.issuperset(map(type, values)) else detached_list(values)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateAccessError("ListState.add(None): list state elements cannot be None")
        if type(value) not in ATOMIC:
            value = detached(value)
        entries = self._entries_for_write()
        key = self._backend._key
        values = entries.get(key)
        if values is None:
            entries[key] = [value]
        else:
            values.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        new = detached_list(checked_list_elements(values, adding=True))
        if not new:
            return
        entries = self._entries_for_write()
        key = self._backend._key
        existing = entries.get(key)
        if existing is None:
            entries[key] = new
        else:
            existing.extend(new)

    def update(self, values: Iterable[Any] | None) -> None:
        new = detached_list(checked_list_elements(values))
        if new:
            self._put(new)
        else:
            self.clear()


class HeapMapState(HeapState, MapState):
    """Entries are held by ``UserKeys`` (equal when their serialized bytes are) and copied values."""

    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable") -> None:
        super().__init__(backend, table)
        self._keys = table.user_keys
        self._plain = table.user_keys.plain  # type: ignore[union-attr]

    def _map(self) -> dict[Any, Any] | None:
        return self._get()

    def _map_for_write(self) -> dict[Any, Any]:
        entries = self._entries_for_write()
        key = self._backend._key
        mapping = entries.get(key)
        if mapping is None:
            mapping = entries[key] = {}
        return mapping

    def get(self, user_key: Any) -> Any:
        backend = self._backend
        entries = self._groups[backend._index].get(self._namespace)
        mapping = None if entries is None else entries.get(backend._key)
        if mapping is None:
            return None
        value = mapping.get(user_key if type(user_key) in self._plain else self._keys.held(user_key))
        return value if type(value) in ATOMIC else detached(value)

    def put(self, user_key: Any, value: Any) -> None:
        held = user_key if type(user_key) in self._plain else self._keys.held(user_key)
        if type(value) not in ATOMIC:
            value = detached(value)
        entries = self._entries_for_write()
        key = self._backend._key
        mapping = entries.get(key)
        if mapping is None:
            entries[key] = {held: value}
        else:
            mapping[held] = value

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        if entries:
            held = self._keys.held
            new = {held(k): detached(v) for k, v in entries.items()}
            self._map_for_write().update(new)

    def remove(self, user_key: Any) -> None:
        mapping = self._map()
        held = self._keys.held(user_key)
        if mapping is None or held not in mapping:
            return
        mapping = self._map_for_write()
        del mapping[held]
        if not mapping:
            self.clear()

    def contains(self, user_key: Any) -> bool:
        mapping = self._map()
        return mapping is not None and self._keys.held(user_key) in mapping

    def items(self) -> Iterator[tuple[Any, Any]]:
        mapping = self._map()
        if not mapping:
            return iter(())
        if self._plain.issuperset(map(type, mapping)) and ATOMIC.issuperset(map(type, mapping.values())):
            return iter(list(mapping.items()))  # keys held as themselves, values immutable: nothing to convert
        user_key = self._keys.user_key
        return iter([(user_key(k), detached(v)) for k, v in mapping.items()])

    def is_empty(self) -> bool:
        return not self._map()


class HeapReducingState(HeapState, ReducingState):
    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable", reduce_function: Any) -> None:
        super().__init__(backend, table)
        self._reduce = reduce_function

    def get(self) -> Any:
        backend = self._backend
        entries = self._groups[backend._index].get(self._namespace)
        value = None if entries is None else entries.get(backend._key)
        return value if type(value) in ATOMIC else detached(value)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateAccessError("ReducingState.add(None): reducing state cannot add None")
        if type(value) not in ATOMIC:
            value = detached(value)  # the reduce function may keep it: the state owns what it holds
        backend = self._backend
        entries = self._groups[backend._index].get(self._namespace)
        current = None if entries is None else entries.get(backend._key)
        if current is not None:
            value = self._reduce(current if type(current) in ATOMIC else self._private(current), value)
        self._entries_for_write()[backend._key] = value


class HeapAggregatingState(HeapState, AggregatingState):
    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable", aggregate_function: Any) -> None:
        super().__init__(backend, table)
        self._fn = aggregate_function

    def get(self) -> Any:
        backend = self._backend
        entries = self._groups[backend._index].get(self._namespace)
        if entries is None or (accumulator := entries.get(backend._key)) is None:
            return None
        result = self._fn.get_result(accumulator)
        return result if type(result) in ATOMIC else detached(result)

    def add(self, value: Any) -> None:
        backend, fn = self._backend, self._fn
        entries = self._groups[backend._index].get(self._namespace)
        accumulator = None if entries is None else entries.get(backend._key)
        if accumulator is None:
            accumulator = fn.create_accumulator()
        elif type(accumulator) not in ATOMIC:
            accumulator = self._private(accumulator)
        self._entries_for_write()[backend._key] = fn.add(value if type(value) in ATOMIC else detached(value),
                                                         accumulator)
