"""Bulk access (``spi.bulk_state``) over a ``KVTable``: the stored keys of all keys are built in
one pass (keys serialized with ``serialize_many``), read with ``KVTable.get_many`` and written
with ``KVTable.write_many`` (RocksDB: one write batch), with the layout and changelog
bookkeeping of the per-key states (``kv_states``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, cast

from statekit.backends.common.key_layout import (
    KEY_GROUP_PREFIX_BYTES, SINGLE_BYTES, deserialize_list, encode_list, varint,
)
from statekit.backends.common.kv_states import KVStateAccess
from statekit.backends.common.registration import RegisteredState
from statekit.spi.bulk_state import (
    BulkAggregatingState, BulkListState, BulkReducingState, BulkState, BulkValueState, KeyBatch, check_aligned,
    check_elements, check_no_none,
)

if TYPE_CHECKING:
    from statekit.backends.common.kv_backend import KVKeyedStateBackend
    from statekit.backends.common.kv_store import KVTable


class KVBulkState(KVStateAccess, BulkState):
    def _cells(self, keys: KeyBatch) -> list[bytes]:
        """The stored key of each key's cell in the current namespace (the same for every state
        of the backend: derived once per batch and namespace)."""
        namespace = self._namespace_part
        return keys.derived((id(self._backend), namespace), lambda: [
            prefix + namespace for prefix in keys.derived(id(self._backend), lambda: self._key_prefixes(keys))])

    def _key_prefixes(self, keys: KeyBatch) -> list[bytes]:
        backend = self._backend
        found = list(map(backend._kg_prefixes.get, keys.key_groups))
        if None in found:
            bad = found.index(None)
            raise backend._key_outside_range(keys.keys[bad], keys.key_groups[bad])
        kg_prefixes = cast("list[bytes]", found)  # no None left
        single = SINGLE_BYTES  # a one-byte varint, inline
        return [kg_prefix + (single[n] if (n := len(key_bytes)) < 128 else varint(n)) + key_bytes
                for kg_prefix, key_bytes in zip(kg_prefixes, backend.key_bytes.serialize_many(keys.keys))]

    def _write(self, cells: Sequence[bytes], datas: Sequence[bytes | None]) -> None:
        """Store ``datas[i]`` in ``cells[i]`` (None: delete), recorded for changelog snapshots."""
        changelog = self._backend._changelog
        if changelog.enabled:
            start, dirty, name = self._backend.key_group_range.start, changelog.dirty, self._name
            for cell in cells:
                dirty[int.from_bytes(cell[:KEY_GROUP_PREFIX_BYTES], "big") - start].add((name, cell))
        self._table.write_many(zip(cells, datas))

    def clear_many(self, keys: KeyBatch) -> None:
        cells = self._cells(keys)
        self._write(cells, [None] * len(cells))


class KVBulkValueState(KVBulkState, BulkValueState):
    def __init__(self, backend: "KVKeyedStateBackend", table: "KVTable", registration: RegisteredState,
                 default: Any) -> None:
        super().__init__(backend, table, registration)
        self._default_bytes = None if default is None else self._serializer.serialize(default)

    def get_many(self, keys: KeyBatch) -> list[Any]:
        datas = self._table.get_many(self._cells(keys))
        default = self._default_bytes
        if default is not None:
            datas = [default if data is None else data for data in datas]
        elif None in datas:
            deserialize = self._serializer.deserialize
            return [None if data is None else deserialize(data) for data in datas]
        return self._serializer.deserialize_many(datas)

    def update_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "ValueState.update_many")
        serializer = self._serializer  # every value serialized before any write
        if any(v is None for v in values):
            datas: list[bytes | None] = [None if v is None else serializer.serialize(v) for v in values]
        else:
            datas = list(serializer.serialize_many(values))
        self._write(self._cells(keys), datas)


class KVBulkListState(KVBulkState, BulkListState):
    def get_many(self, keys: KeyBatch) -> list[list[Any]]:
        serializer = self._serializer
        return [deserialize_list(data, serializer) if data else [] for data in self._table.get_many(self._cells(keys))]

    def add_many(self, keys: KeyBatch, elements: Sequence[Any]) -> None:
        check_aligned(keys, elements, "ListState.add_many")
        serialize_many = self._serializer.serialize_many
        encoded = [encode_list(serialize_many(check_elements(e, "ListState.add_many"))) for e in elements]
        cells = self._cells(keys)
        wanted = [i for i, data in enumerate(encoded) if data]
        stored = self._table.get_many([cells[i] for i in wanted])
        lists: dict[bytes, bytes] = {}  # a key met twice appends to what it was given the first time
        for i, existing in zip(wanted, stored):
            lists[cells[i]] = lists.get(cells[i], existing or b"") + encoded[i]
        self._write(list(lists), list(lists.values()))

    def update_many(self, keys: KeyBatch, elements: Sequence[Any]) -> None:
        check_aligned(keys, elements, "ListState.update_many")
        serialize_many = self._serializer.serialize_many
        datas = [encode_list(serialize_many(check_elements(e, "ListState.update_many"))) or None for e in elements]
        self._write(self._cells(keys), datas)


class KVBulkAppendingState(KVBulkState, BulkReducingState, BulkAggregatingState):
    """Reducing (``reduce_function``) or aggregating (``aggregate_function``) state."""

    def __init__(self, backend: "KVKeyedStateBackend", table: "KVTable", registration: RegisteredState,
                 reduce_function: Any = None, aggregate_function: Any = None) -> None:
        super().__init__(backend, table, registration)
        self._reduce = reduce_function
        self._fn = aggregate_function

    def get_many(self, keys: KeyBatch) -> list[Any]:
        deserialize = self._serializer.deserialize
        result = self._fn.get_result if self._fn is not None else None
        return [None if data is None else result(deserialize(data)) if result else deserialize(data)
                for data in self._table.get_many(self._cells(keys))]

    def add_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "add_many")
        reduce, fn, serializer = self._reduce, self._fn, self._serializer
        if fn is None:
            check_no_none(values, "ReducingState.add_many")
        cells = self._cells(keys)
        current: dict[bytes, Any] = {}  # a key met twice adds to what it was given the first time
        given: set[bytes] = set()  # cells whose current value is a caller's object (a reducing state's first value)
        for cell, data, value in zip(cells, self._table.get_many(cells), values):
            if cell in current:
                at = current[cell]
                if cell in given:  # reduce into a copy: the function may change its first argument in place
                    at = serializer.deserialize(serializer.serialize(at))
            else:
                at = None if data is None else serializer.deserialize(data)
            if fn is None:
                current[cell] = result = value if at is None else reduce(at, value)
                if result is value:
                    given.add(cell)
                else:
                    given.discard(cell)
            else:
                current[cell] = fn.add(value, fn.create_accumulator() if at is None else at)
        datas = serializer.serialize_many(current.values())
        self._write(list(current), datas)
