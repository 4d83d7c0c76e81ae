"""Bulk access (``spi.bulk_state``) on the heap's state tables: a batch's keys in runs of one key
group, each run read and written on its ``namespace -> key -> value`` dict in C (``map``,
``dict.update``), with the same copies, copy-on-write and changelog bookkeeping as the per-key
states (``states``)."""
from __future__ import annotations

from itertools import groupby, repeat
from operator import is_
from typing import TYPE_CHECKING, Any, Sequence

from statekit.backends.common.copies import ATOMIC, detached, detached_list
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
    def _runs(self, keys: KeyBatch) -> list[tuple[int, int, int]]:
        """(key-group index, first, end) of each run of keys in one key group, every key group
        checked to be in this backend's range (shared by the batch's states)."""
        return keys.derived(("heap-runs", id(self._backend)), lambda: self._key_group_runs(keys))

    def _key_group_runs(self, keys: KeyBatch) -> list[tuple[int, int, int]]:
        start, size = self._backend.key_group_range.start, self._table.size
        runs, first = [], 0
        for key_group, members in groupby(keys.key_groups):
            end = first + sum(1 for _ in members)
            if not 0 <= key_group - start < size:
                raise self._backend._key_outside_range(keys.keys[first], key_group)
            runs.append((key_group - start, first, end))
            first = end
        return runs

    def _indices(self, keys: KeyBatch) -> list[int]:
        """The key-group index of every key."""
        return [index for index, first, end in self._runs(keys) for _ in range(end - first)]

    def _held(self, keys: KeyBatch, absent: Any = _MISSING) -> list[Any]:
        """What each key holds in the current namespace (``absent`` where nothing): one dict
        lookup per key in C (``map``), one namespace lookup per run."""
        groups, namespace, keys_ = self._table.groups, self._namespace, keys.keys
        held: list[Any] = []
        for index, first, end in self._runs(keys):
            entries = groups[index].get(namespace)
            if entries is None:
                held.extend(repeat(absent, end - first))
            else:
                held.extend(map(entries.get, keys_[first:end], repeat(absent)))
        return held

    def _write(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        """Hold ``values[i]`` (as given: the caller copied it) for each key; ``None`` removes."""
        table, namespace, name = self._table, self._namespace, self._name
        groups, owned = table.groups, table.owned
        changelog = self._backend._changelog
        dirty = changelog.dirty if changelog.enabled else None
        keys_ = keys.keys
        for index, first, end in self._runs(keys):
            group = groups[index] if owned[index] else table.writable(index)
            run_keys, run_values = keys_[first:end], values[first:end]
            entries = group.get(namespace)
            if any(map(is_, run_values, repeat(None))) or any(map(is_, run_values, repeat(_UNCHANGED))):
                entries = _write_each(group, namespace, entries, run_keys, run_values)
            else:  # the common case, in C: later duplicates win, as in a loop
                if entries is None:
                    entries = group[namespace] = {}
                entries.update(zip(run_keys, run_values))
            if dirty is not None:
                dirty[index].update(zip(repeat(name), run_keys, repeat(namespace)))

    def clear_many(self, keys: KeyBatch) -> None:
        self._write(keys, [None] * len(keys.keys))


def _write_each(group: dict[Any, Any], namespace: Any, entries: dict[Any, Any] | None, keys: Sequence[Any],
                values: Sequence[Any]) -> dict[Any, Any] | None:
    """``_write`` of one run with removals or keys left unchanged, key by key."""
    for key, value in zip(keys, values):
        if value is _UNCHANGED:
            continue
        if value is None:
            if entries is not None and key in entries:
                del entries[key]
                if not entries:
                    del group[namespace]
                    entries = None
        elif entries is None:
            entries = group[namespace] = {key: value}
        else:
            entries[key] = value
    return entries


class HeapBulkValueState(HeapBulkState, BulkValueState):
    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable", default: Any) -> None:
        super().__init__(backend, table)
        self._default = default

    def get_many(self, keys: KeyBatch) -> list[Any]:
        default, atomic = self._default, ATOMIC
        if type(default) in atomic:  # keys without a value read the default itself
            held = self._held(keys, default)
            if atomic.issuperset(map(type, held)):  # nothing to copy (one pass in C)
                return held
            return [value if type(value) in atomic else detached(value) for value in held]
        missing = _MISSING
        return [(detached(default) if value is missing else value if type(value) in atomic else detached(value))
                for value in self._held(keys)]

    def update_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "ValueState.update_many")
        if ATOMIC.issuperset(map(type, values)):  # nothing to copy: one pass in C
            self._write(keys, list(values))
        else:
            self._write(keys, [v if type(v) in ATOMIC else detached(v) for v in values])


class HeapBulkListState(HeapBulkState, BulkListState):
    def get_many(self, keys: KeyBatch) -> list[list[Any]]:
        return [detached_list(values) if values is not _MISSING else [] for values in self._held(keys)]

    def add_many(self, keys: KeyBatch, elements: Sequence[Any]) -> None:
        check_aligned(keys, elements, "ListState.add_many")
        new = [detached_list(check_elements(e, "ListState.add_many")) for e in elements]
        current: dict[tuple[int, Any], list[Any]] = {}  # a key met twice appends to its own new list
        merged = []
        indices = self._indices(keys)
        for i, (key, index, held) in enumerate(zip(keys.keys, indices, self._held(keys))):
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
                for held in self._held(keys)]

    def add_many(self, keys: KeyBatch, values: Sequence[Any]) -> None:
        check_aligned(keys, values, "add_many")
        reduce, fn = self._reduce, self._fn
        if fn is None:
            check_no_none(values, "ReducingState.add_many")
        current: dict[tuple[int, Any], Any] = {}  # a key met twice adds to what it was given the first time
        results = []
        indices = self._indices(keys)
        for i, (key, index, held) in enumerate(zip(keys.keys, indices, self._held(keys))):
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
