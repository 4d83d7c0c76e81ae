"""Timers on the heap: a ``StateTable`` of kind ``timers`` (per key group, ``namespace -> key ->
set of timestamps``, copy-on-write like every heap state) is the state that snapshots write, and a
binary heap over all of the range's timers is the firing order. The heap is derived: built from
the table when the queue is created (after any restore), and entries whose timer was removed
are skipped when they reach the top. Namespaces are held as the table holds them
(``copies.Namespaces``: by their bytes unless plain), and fire as the user's objects.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from statekit.backends.common.key_layout import varint
from statekit.backends.common.namespaces import encode_namespace
from statekit.backends.heap.copies import SerializedKey
from statekit.spi.state import VOID_NAMESPACE
from statekit.spi.timers import Timer, TimerQueue, check_timestamp

if TYPE_CHECKING:
    from statekit.backends.heap.backend import HeapKeyedStateBackend
    from statekit.backends.heap.state_table import StateTable

#: (timestamp, key group, serialized key and namespace, key, held namespace): the first three give
#: the firing order of ``spi.timers``, identical to the order of the KV backends' timer index
_Entry = tuple[int, int, bytes, Any, Any]


class HeapTimerQueue(TimerQueue):
    def __init__(self, backend: "HeapKeyedStateBackend", table: "StateTable") -> None:
        self._backend = backend
        self._table = table
        self._name = table.registration.name
        self._namespaces = table.namespaces
        self._plain_namespaces = table.namespaces.plain
        self._namespace_serializer = table.registration.namespace_serializer
        self._serialize_key = backend.key_bytes.serialize
        start = backend.key_group_range.start
        self._heap: list[_Entry] = [
            (timestamp, start + index, self._order(key, namespace), key, namespace)
            for index, group in enumerate(table.groups[:table.size])
            for namespace, entries in group.items()
            for key, timestamps in entries.items()
            for timestamp in timestamps]
        heapq.heapify(self._heap)

    def _order(self, key: Any, namespace: Any) -> bytes:
        key_bytes = self._serialize_key(key)
        # ``Namespaces.to_bytes``, inlined: one call less per timer added
        namespace_bytes = (namespace.data if type(namespace) is SerializedKey
                           else encode_namespace(namespace, self._namespace_serializer))
        return varint(len(key_bytes)) + key_bytes + varint(len(namespace_bytes)) + namespace_bytes

    def _holds(self, index: int, key: Any, namespace: Any, timestamp: int) -> bool:
        entries = self._table.groups[index].get(namespace)  # fails when there is no current key
        timestamps = None if entries is None else entries.get(key)
        return timestamps is not None and timestamp in timestamps

    def _changed(self, index: int, key: Any, namespace: Any) -> None:
        changelog = self._backend._changelog
        if changelog.enabled:
            changelog.dirty[index].add((self._name, key, namespace))

    def add(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        backend = self._backend
        index, key = backend._index, backend._key
        if type(namespace) not in self._plain_namespaces:
            namespace = self._namespaces.held(namespace)  # refuses a namespace of no bytes
        if self._holds(index, key, namespace, check_timestamp(timestamp)):
            return
        order = self._order(key, namespace)
        group = self._table.writable(index)
        entries = group.get(namespace)
        if entries is None:
            entries = group[namespace] = {}
        timestamps = entries.get(key)
        if timestamps is None:
            timestamps = entries[key] = set()
        timestamps.add(timestamp)
        self._changed(index, key, namespace)
        heapq.heappush(self._heap, (timestamp, backend._key_group, order, key, namespace))

    def remove(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        backend = self._backend
        if type(namespace) not in self._plain_namespaces:
            namespace = self._namespaces.held(namespace)
        if self._holds(backend._index, backend._key, namespace, check_timestamp(timestamp)):
            self._discard(backend._index, backend._key, namespace, timestamp)  # its heap entry is skipped later

    def _discard(self, index: int, key: Any, namespace: Any, timestamp: int) -> None:
        group = self._table.writable(index)
        entries = group[namespace]
        timestamps = entries[key]
        timestamps.discard(timestamp)
        if not timestamps:
            del entries[key]
            if not entries:
                del group[namespace]
        self._changed(index, key, namespace)

    def poll(self, up_to: int) -> Timer | None:
        heap = self._heap
        start = self._backend.key_group_range.start
        while heap and heap[0][0] <= up_to:
            timestamp, key_group, _, key, namespace = heapq.heappop(heap)
            if self._holds(key_group - start, key, namespace, timestamp):
                self._discard(key_group - start, key, namespace, timestamp)
                if type(namespace) is SerializedKey:
                    namespace = self._namespaces.namespace(namespace)
                return Timer(timestamp, key, key_group, namespace)
        return None

    def peek_timestamp(self) -> int | None:
        heap = self._heap
        start = self._backend.key_group_range.start
        while heap:
            timestamp, key_group, _, key, namespace = heap[0]
            if self._holds(key_group - start, key, namespace, timestamp):
                return timestamp
            heapq.heappop(heap)
        return None
