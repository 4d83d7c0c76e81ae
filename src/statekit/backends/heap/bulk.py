"""Bulk access (``spi.bulk_state``) on the heap's state tables: one pass over the keys, each
reaching its key group's ``namespace -> key -> value`` dict directly, with the same copies,
copy-on-write and changelog bookkeeping as the per-key states (``states``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from statekit.backends.heap.copies import ATOMIC, detached, detached_list
from statekit.backends.heap.states import HeapStateAccess
from statekit.spi.bulk_state import (
    BulkAggregatingState, BulkListState, BulkReducingState, BulkState, BulkValueState, KeyBatch, check_aligned,
    check_elements, check_no_none,
)

if TYPE_CHECKING:
    from statekit.backends.heap.backend import HeapKeyedStateBackend
    from statekit.backends.heap.state_table import StateTable

_MISSING = object()
_UNCHANGED = object()  # for ``_write``: leave the key as it is


class HeapBulkState(HeapStateAccess, BulkState):
    def _indices(self, keys: KeyBatch) -> list[int]:
        """The key-group index of every key, all checked to be in this backend's range."""
        start = self._backend.key_group_range.start
        indices = [key_group - start for key_group in keys.key_groups]
        if indices and (min(indices) < 0 or max(indices) >= self._table.size):
            bad = next(i for i, index in enumerate(indices) if not 0 <= index < self._table.size)
            raise self._backend._key_outside_range(keys.keys[bad], keys.key_groups[bad])
        return indices

    def _held(self, keys: KeyBatch, indices: list[int]) -> list[Any]:
        """What each key holds in the current namespace (``_MISSING`` where nothing)."""
        groups, namespace, missing = self._table.groups, self._namespace, _MISSING
        held: list[Any] = []
        append = held.append
        previous, entries = -1, None
        for key, index in zip(keys.keys, indices):
            if index != previous:  # keys come grouped by key group, typically
                previous, entries = index, groups[index].get(namespace)
            append(missing if entries is None else entries.get(key, missing))
        return held

    def _write(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        """Hold ``values[i]`` (as given: the caller copied it) for each key; ``None`` removes."""
        table, namespace, name = self._table, self._namespace, self._name
        groups, owned = table.groups, table.owned
        changelog = self._backend._changelog
        dirty = changelog.dirty if changelog.enabled else None
        for key, index, value in zip(keys.keys, self._indices(keys), values):
            if value is _UNCHANGED:
                continue
            group = groups[index] if owned[index] else table.writable(index)
            entries = group.get(namespace)
            if value is None:
                if entries is None or key not in entries:
                    continue
                del entries[key]
                if not entries:
                    del group[namespace]
            elif entries is None:
                group[namespace] = {key: value}
            else:
                entries[key] = value
            if dirty is not None:
                dirty[index].add((name, key, namespace))

    def clear_many(self, keys: KeyBatch) -> None:
        self._write(keys, [None] * len(keys.keys))


class HeapBulkValueState(HeapBulkState, BulkValueState):
    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable", default: Any) -> None:
        super().__init__(backend, table)
        self._default = default

    def get_many(self, keys: KeyBatch) -> list[Any]:
        default = self._default
        missing, atomic = _MISSING, ATOMIC
        return [(detached(default) if value is missing else value if type(value) in atomic else detached(value))
                for value in self._held(keys, self._indices(keys))]

    def update_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "ValueState.update_many")
        self._write(keys, [v if type(v) in ATOMIC else detached(v) for v in values])


class HeapBulkListState(HeapBulkState, BulkListState):
    def get_many(self, keys: KeyBatch) -> list[list[Any]]:
        return [detached_list(values) if values is not _MISSING else [] for values in self._held(keys, self._indices(keys))]

    def add_many(self, keys: KeyBatch, elements: Sequence[Any]) -> None:
        check_aligned(keys, elements, "ListState.add_many")
        new = [detached_list(check_elements(e, "ListState.add_many")) for e in elements]
        current: dict[tuple[int, Any], list[Any]] = {}  # a key met twice appends to its own new list
        merged = []
        indices = self._indices(keys)
        for i, (key, index, held) in enumerate(zip(keys.keys, indices, self._held(keys, indices))):
            if not new[i]:
                merged.append(_UNCHANGED)
                continue
            base = current.get((index, key))
            if base is None:
                base = list(held) if held is not _MISSING else []
            base = base + new[i]
            current[(index, key)] = base
            merged.append(base)
        self._write(keys, merged)  # a new list per key: a pending snapshot keeps the old one

    def update_many(self, keys: KeyBatch, elements: Sequence[Any]) -> None:
        check_aligned(keys, elements, "ListState.update_many")
        self._write(keys, [detached_list(check_elements(e, "ListState.update_many")) or None for e in elements])


class HeapBulkAppendingState(HeapBulkState, BulkReducingState, BulkAggregatingState):
    """Reducing (``reduce_function``) or aggregating (``aggregate_function``) state."""

    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable", reduce_function: Any = None,
                 aggregate_function: Any = None) -> None:
        super().__init__(backend, table)
        self._reduce = reduce_function
        self._fn = aggregate_function

    def get_many(self, keys: KeyBatch) -> list[Any]:
        result = self._fn.get_result if self._fn is not None else None
        return [None if held is _MISSING else detached(result(held) if result else held)
                for held in self._held(keys, self._indices(keys))]

    def add_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "add_many")
        reduce, fn = self._reduce, self._fn
        if fn is None:
            check_no_none(values, "ReducingState.add_many")
        current: dict[tuple[int, Any], Any] = {}  # a key met twice adds to what it was given the first time
        results = []
        indices = self._indices(keys)
        for i, (key, index, held) in enumerate(zip(keys.keys, indices, self._held(keys, indices))):
            at = current.get((index, key), _MISSING)
            if at is _MISSING:  # the state's own copy: the functions may change it in place
                at = held if held is _MISSING or type(held) in ATOMIC else detached(held)
            value = detached(values[i])
            if fn is None:
                at = value if at is _MISSING else reduce(at, value)
            else:
                at = fn.add(value, fn.create_accumulator() if at is _MISSING else at)
            current[(index, key)] = at
            results.append(at)
        self._write(keys, results)
