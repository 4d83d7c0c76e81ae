"""The five keyed state kinds over a ``KVTable``, laid out as in ``key_layout``.

The per-key operations are the hot path of every keyed function: they read the backend's cached
cell of the current key directly (``KVKeyedStateBackend._cell`` in the void namespace, else its
``_prefix`` and the namespace part; both built by ``set_current_key`` once per key) and call the
table's methods with no layer between (RocksDB's ``get`` and ``put`` are the native methods,
LMDB's ``get`` while no put is pending: ``lmdb/table.py``)."""
from __future__ import annotations

from itertools import chain, islice
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from statekit.backends.common.key_layout import (
    SINGLE_BYTES, VOID_NAMESPACE_PART, deserialize_list, encode_list, prefix_upper_bound, varint,
)
from statekit.backends.common.namespaces import encode_namespace
from statekit.backends.common.registration import RegisteredState, checked_list_elements
from statekit.spi.errors import StateAccessError
from statekit.spi.state import (
    AggregatingState, ListState, MapState, ReducingState, State, ValueState, VOID_NAMESPACE,
)

if TYPE_CHECKING:
    from statekit.backends.common.kv_backend import KVKeyedStateBackend
    from statekit.backends.common.kv_store import KVTable

class KVStateAccess:
    """The table, registration and encoded current namespace of a state, per-key or bulk."""

    def __init__(self, backend: "KVKeyedStateBackend", table: "KVTable", registration: RegisteredState) -> None:
        self._backend = backend
        self._table = table
        self._registration = registration
        self._name = registration.name
        self._serializer = registration.value_serializer
        self._namespace_part = VOID_NAMESPACE_PART
        #: ``_namespace_part`` outside the void namespace, else None: the per-key states then read
        #: the current key's cell as the backend built it (``KVKeyedStateBackend._cell``)
        self._named: bytes | None = None

    def set_current_namespace(self, namespace: Any) -> None:
        if namespace is VOID_NAMESPACE:
            self._namespace_part = VOID_NAMESPACE_PART
            self._named = None
        else:
            encoded = encode_namespace(namespace, self._registration.namespace_serializer)
            self._namespace_part = self._named = varint(len(encoded)) + encoded


#: map entries decoded at once by ``items`` (a larger map continues chunk by chunk)
ITEMS_CHUNK = 256


class KVState(KVStateAccess, State):
    def _cell(self) -> bytes:
        """The current key's cell in the current namespace (the per-key operations inline this)."""
        backend, named = self._backend, self._named
        if named is None:
            return backend._cell or backend.current_cell()
        return (backend._prefix or backend.current_key_prefix()) + named

    def _write_cell(self) -> bytes:
        """The current cell, recorded as written for changelog snapshots."""
        cell = self._cell()
        if self._backend._changelog.enabled:
            self._written(cell)
        return cell

    def _written(self, cell: bytes) -> None:
        """Record ``cell`` of the current key as written, for changelog snapshots."""
        backend = self._backend
        backend._changelog.dirty[backend._key_group - backend._kg_start].add((self._name, cell))

    def clear(self) -> None:
        self._table.delete(self._write_cell())


class KVValueState(KVState, ValueState):
    def __init__(self, backend: "KVKeyedStateBackend", table: "KVTable", registration: RegisteredState,
                 default: Any) -> None:
        super().__init__(backend, table, registration)
        self._default = default
        self._default_bytes = None if default is None else self._serializer.serialize(default)

    def value(self) -> Any:
        backend, named = self._backend, self._named
        data = self._table.get((backend._cell or backend.current_cell()) if named is None
                               else (backend._prefix or backend.current_key_prefix()) + named)
        if data is None:  # a fresh copy of the default each time, as Flink does
            return None if self._default_bytes is None else self._serializer.deserialize(self._default_bytes)
        return self._serializer.deserialize(data)

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        backend, named = self._backend, self._named
        cell = ((backend._cell or backend.current_cell()) if named is None
                else (backend._prefix or backend.current_key_prefix()) + named)
        if backend._changelog.enabled:
            self._written(cell)
        self._table.put(cell, self._serializer.serialize(value))


class KVListState(KVState, ListState):
    """One value per list, elements length-prefixed: ``add`` is read-append-write."""

    def get(self) -> list[Any]:
        backend, named = self._backend, self._named
        data = self._table.get((backend._cell or backend.current_cell()) if named is None
                               else (backend._prefix or backend.current_key_prefix()) + named)
        return deserialize_list(data, self._serializer) if data else []

    def add(self, value: Any) -> None:
        if value is None:
            raise StateAccessError("ListState.add(None): list state elements cannot be None")
        backend, named = self._backend, self._named
        cell = ((backend._cell or backend.current_cell()) if named is None
                else (backend._prefix or backend.current_key_prefix()) + named)
        if backend._changelog.enabled:
            self._written(cell)
        element = self._serializer.serialize(value)
        size = len(element)
        table = self._table
        existing = table.get(cell)
        table.put(cell, (existing or b"") + (SINGLE_BYTES[size] if size < 128 else varint(size)) + element)

    def add_all(self, values: Iterable[Any]) -> None:
        new = checked_list_elements(values, adding=True)
        if new:
            cell = self._write_cell()
            existing = self._table.get(cell)
            self._table.put(cell, (existing or b"") + encode_list(self._serializer.serialize_many(new)))

    def update(self, values: Iterable[Any] | None) -> None:
        new = checked_list_elements(values)
        if new:
            self._table.put(self._write_cell(), encode_list(self._serializer.serialize_many(new)))
        else:
            self.clear()


class KVMapState(KVState, MapState):
    """One entry per map entry: key = cell | serialized user key."""

    def __init__(self, backend: "KVKeyedStateBackend", table: "KVTable", registration: RegisteredState) -> None:
        super().__init__(backend, table, registration)
        self._user_key_serializer = registration.user_key_serializer

    def get(self, user_key: Any) -> Any:
        backend, named = self._backend, self._named
        data = self._table.get(((backend._cell or backend.current_cell()) if named is None
                                else (backend._prefix or backend.current_key_prefix()) + named)
                               + self._user_key_serializer.serialize(user_key))
        return None if data is None else self._serializer.deserialize(data)

    def put(self, user_key: Any, value: Any) -> None:
        backend, named = self._backend, self._named
        cell = ((backend._cell or backend.current_cell()) if named is None
                else (backend._prefix or backend.current_key_prefix()) + named)
        if backend._changelog.enabled:
            self._written(cell)
        self._table.put(cell + self._user_key_serializer.serialize(user_key), self._serializer.serialize(value))

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        cell = self._write_cell()
        uk, val = self._user_key_serializer.serialize, self._serializer.serialize
        for user_key, value in entries.items():
            self._table.put(cell + uk(user_key), val(value))

    def remove(self, user_key: Any) -> None:
        self._table.delete(self._write_cell() + self._user_key_serializer.serialize(user_key))

    def contains(self, user_key: Any) -> bool:
        return self._table.get(self._cell() + self._user_key_serializer.serialize(user_key)) is not None

    def items(self) -> Iterator[tuple[Any, Any]]:
        """The first ``ITEMS_CHUNK`` entries are read and decoded by this call (a small map, typically:
        no generator in between), any further ones ``ITEMS_CHUNK`` at a time."""
        cell = self._cell()
        entries = iter(self._table.items(cell, prefix_upper_bound(cell)))
        decode = _entry_decoder(len(cell), self._user_key_serializer.deserialize, self._serializer.deserialize)
        first = decode(entries)
        if len(first) < ITEMS_CHUNK:
            return iter(first)
        return chain(first, _decoded_chunks(entries, decode))

    def is_empty(self) -> bool:
        cell = self._cell()
        return self._table.first(cell, prefix_upper_bound(cell)) is None

    def clear(self) -> None:
        cell = self._write_cell()
        self._table.delete_range(cell, prefix_upper_bound(cell))


class KVReducingState(KVState, ReducingState):
    def __init__(self, backend: "KVKeyedStateBackend", table: "KVTable", registration: RegisteredState,
                 reduce_function: Any) -> None:
        super().__init__(backend, table, registration)
        self._reduce = reduce_function

    def get(self) -> Any:
        backend, named = self._backend, self._named
        data = self._table.get((backend._cell or backend.current_cell()) if named is None
                               else (backend._prefix or backend.current_key_prefix()) + named)
        return None if data is None else self._serializer.deserialize(data)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateAccessError("ReducingState.add(None): reducing state cannot add None")
        backend, named = self._backend, self._named
        cell = ((backend._cell or backend.current_cell()) if named is None
                else (backend._prefix or backend.current_key_prefix()) + named)
        if backend._changelog.enabled:
            self._written(cell)
        table, serializer = self._table, self._serializer
        data = table.get(cell)
        result = value if data is None else self._reduce(serializer.deserialize(data), value)
        table.put(cell, serializer.serialize(result))


class KVAggregatingState(KVState, AggregatingState):
    def __init__(self, backend: "KVKeyedStateBackend", table: "KVTable", registration: RegisteredState,
                 aggregate_function: Any) -> None:
        super().__init__(backend, table, registration)
        self._fn = aggregate_function

    def get(self) -> Any:
        backend, named = self._backend, self._named
        data = self._table.get((backend._cell or backend.current_cell()) if named is None
                               else (backend._prefix or backend.current_key_prefix()) + named)
        return None if data is None else self._fn.get_result(self._serializer.deserialize(data))

    def add(self, value: Any) -> None:
        backend, named = self._backend, self._named
        cell = ((backend._cell or backend.current_cell()) if named is None
                else (backend._prefix or backend.current_key_prefix()) + named)
        if backend._changelog.enabled:
            self._written(cell)
        table, serializer, fn = self._table, self._serializer, self._fn
        data = table.get(cell)
        accumulator = fn.create_accumulator() if data is None else serializer.deserialize(data)
        table.put(cell, serializer.serialize(fn.add(value, accumulator)))


_Decoder = Callable[[Iterator[tuple[bytes, bytes]]], list[tuple[Any, Any]]]


def _entry_decoder(start: int, user_key_of: Callable[[bytes], Any], value_of: Callable[[bytes], Any]) -> _Decoder:
    """Reads and decodes the next ``ITEMS_CHUNK`` of a map's stored entries (user keys start at
    ``start``) into (user key, value) pairs."""
    def decode(entries: Iterator[tuple[bytes, bytes]]) -> list[tuple[Any, Any]]:
        return [(user_key_of(k[start:]), value_of(v)) for k, v in islice(entries, ITEMS_CHUNK)]
    return decode


def _decoded_chunks(entries: Iterator[tuple[bytes, bytes]], decode: _Decoder) -> Iterator[tuple[Any, Any]]:
    while chunk := decode(entries):
        yield from chunk
