"""Timers in an ordered key-value store (Flink's RocksDB priority-queue state).

A timer state has two tables. Its own table holds the timers as cells with the timestamp as user
key, like a map state's entries: snapshots, changelog deltas, restores and rescaling treat it as
they treat every state. The index table ``<state>/by-time`` holds the same timers ordered by time
within each key group (``key_layout.timer_index_key``), so the next timers to fire are a short
range scan. The queue caches each key group's next index keys (up to ``LOOKAHEAD`` of them, read
in one scan, and kept exact as timers are added and removed) and keeps the key groups in a binary
heap by their first: polling a timer reads the store only when a key group's cached keys run out,
never the whole range.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from statekit.backends.common.key_layout import (
    KEY_GROUP_PREFIX_BYTES, TIMESTAMP_BYTES, key_group_bounds, prefix_upper_bound, split_cell_key, timer_cell_of_index_key,
    timer_index_key, timestamp_bytes, timestamp_of_bytes, varint,
)
from statekit.backends.common.namespaces import decode_namespace, encode_namespace
from statekit.backends.common.registration import RegisteredState
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.state import VOID_NAMESPACE
from statekit.spi.timers import Timer, TimerQueue, check_timestamp

if TYPE_CHECKING:
    from statekit.backends.common.kv_backend import KVKeyedStateBackend
    from statekit.backends.common.kv_store import KVTable

INDEX_SUFFIX = "/by-time"
_EMPTY = b""
_UNKNOWN = object()  # a key group whose next keys must be read from the index again
#: how many of a key group's next index keys one scan reads (a window's timers fire one after another)
LOOKAHEAD = 32


def index_table_name(state_name: str) -> str:
    return state_name + INDEX_SUFFIX


class KVTimerQueue(TimerQueue):
    def __init__(self, backend: "KVKeyedStateBackend", registration: RegisteredState) -> None:
        self._backend = backend
        self._name = registration.name
        self._namespace_serializer = registration.namespace_serializer
        self._cells = backend._table(registration.name)
        self._index = backend._table(index_table_name(registration.name))
        self._start = backend.key_group_range.start
        self._bounds = [key_group_bounds(KeyGroupRange(kg, kg)) for kg in backend.key_group_range]
        self.heads_changed()

    def heads_changed(self) -> None:
        """The tables were written behind the queue's back (a restore): read every head again."""
        #: per key group: its next index keys in order (every one of its timers up to the last
        #: of them, or all of them where ``_complete``), or _UNKNOWN
        self._ahead: list[Any] = [_UNKNOWN] * len(self._bounds)
        self._complete = [False] * len(self._bounds)
        self._unknown = set(range(len(self._bounds)))
        #: (timestamp + index key, key-group index) of key groups' heads; current while it is the head
        self._queue: list[tuple[bytes, int]] = []

    def _cell(self, namespace: Any) -> bytes:
        namespace_bytes = encode_namespace(namespace, self._namespace_serializer)
        return self._backend.current_key_prefix() + varint(len(namespace_bytes)) + namespace_bytes

    def add(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        cell = self._cell(namespace)
        stamp = timestamp_bytes(check_timestamp(timestamp))
        if self._cells.get(cell + stamp) is not None:
            return
        self._cells.put(cell + stamp, _EMPTY)
        index_key = timer_index_key(cell, stamp)
        self._index.put(index_key, _EMPTY)
        self._backend.timer_cell_changed(self._name, cell)
        position = self._backend._key_group - self._start
        ahead = self._ahead[position]
        if ahead is _UNKNOWN or not (self._complete[position] or index_key < ahead[-1]):
            return  # beyond the cached keys: read when they run out
        at = bisect_left(ahead, index_key)
        ahead.insert(at, index_key)
        if at == 0:
            self._push_head(position)

    def remove(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        cell = self._cell(namespace)
        stamp = timestamp_bytes(check_timestamp(timestamp))
        if self._cells.get(cell + stamp) is None:
            return
        self._delete(cell, stamp)

    def _delete(self, cell: bytes, stamp: bytes) -> None:
        self._cells.delete(cell + stamp)
        index_key = timer_index_key(cell, stamp)
        self._index.delete(index_key)
        self._backend.timer_cell_changed(self._name, cell)
        position = int.from_bytes(cell[:KEY_GROUP_PREFIX_BYTES], "big") - self._start
        ahead = self._ahead[position]
        if ahead is _UNKNOWN:
            return
        at = bisect_left(ahead, index_key)
        if at == len(ahead) or ahead[at] != index_key:
            return  # beyond the cached keys
        del ahead[at]
        if not ahead and not self._complete[position]:
            self._ahead[position] = _UNKNOWN  # more may follow in the index
            self._unknown.add(position)
        elif at == 0 and ahead:
            self._push_head(position)

    def _push_head(self, position: int) -> None:
        """Queue the key group by its first key (ordered by timestamp, then by the index key: key
        group, timestamp, rest); an entry stays current while that key is the first."""
        index_key = self._ahead[position][0]
        stamp = index_key[KEY_GROUP_PREFIX_BYTES:KEY_GROUP_PREFIX_BYTES + TIMESTAMP_BYTES]
        heapq.heappush(self._queue, (stamp + index_key, position))

    def _head(self, position: int) -> Any:
        """The key group's first index key, None without timers, or _UNKNOWN."""
        ahead = self._ahead[position]
        return ahead if ahead is _UNKNOWN else ahead[0] if ahead else None

    def _read_heads(self) -> None:
        for position in sorted(self._unknown):
            lower, upper = self._bounds[position]
            ahead = self._index.first_keys(lower, upper, LOOKAHEAD)
            self._ahead[position], self._complete[position] = ahead, len(ahead) < LOOKAHEAD
            if ahead:
                self._push_head(position)
        self._unknown.clear()

    def _first(self) -> tuple[bytes, int] | None:
        """The current head of the queue: (index key, key-group index), stale entries dropped."""
        if self._unknown:
            self._read_heads()
        queue = self._queue
        while queue:
            order, position = queue[0]
            index_key = order[TIMESTAMP_BYTES:]
            if self._head(position) == index_key:
                return index_key, position
            heapq.heappop(queue)
            if self._ahead[position] is _UNKNOWN:
                self._read_heads()
        return None

    def poll(self, up_to: int) -> Timer | None:
        first = self._first()
        if first is None:
            return None
        index_key, _ = first
        cell, stamp = timer_cell_of_index_key(index_key)
        timestamp = timestamp_of_bytes(stamp)
        if timestamp > up_to:
            return None
        self._delete(cell, stamp)
        key_group, key_bytes, namespace_bytes, _ = split_cell_key(cell)
        return Timer(timestamp, self._backend.key_serializer.deserialize(key_bytes), key_group,
                     decode_namespace(namespace_bytes, self._namespace_serializer))

    def peek_timestamp(self) -> int | None:
        first = self._first()
        return None if first is None else timestamp_of_bytes(timer_cell_of_index_key(first[0])[1])


def index_entries(cell_entries: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The index entries of timer cells' entries (``cell + timestamp``, as the state's table holds them)."""
    return [(timer_index_key(stored[:-TIMESTAMP_BYTES], stored[-TIMESTAMP_BYTES:]), _EMPTY)
            for stored, _ in cell_entries]


def delete_timer_cell(cells: "KVTable", index: "KVTable", cell: bytes) -> None:
    """Remove every timer of ``cell`` from the state's table and from the index."""
    upper = prefix_upper_bound(cell)
    for stored, _ in index_entries(list(cells.items(cell, upper))):
        index.delete(stored)
    cells.delete_range(cell, upper)
