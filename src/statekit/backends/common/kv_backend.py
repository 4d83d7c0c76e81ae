"""A keyed state backend over any ordered byte key-value store.

Subclasses provide the store (``_table``, ``_view``, ``dispose``); this class provides the state
kinds, the key layout, key iteration, and full snapshots and restores in the canonical format.
The RocksDB and LMDB backends are built on it, and so can a plugin's.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import replace
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.backends.common.abstract_keyed import AbstractKeyedStateBackend
from statekit.backends.common.canonical import (
    CHANGELOG_FORMAT, DEFAULT_COMPRESSION, MAX_BATCH_ROWS, CanonicalSnapshotWriter, state_runs,
)
from statekit.backends.common.cell_columns import cells_of, split_cell_keys
from statekit.backends.common.changelog import (
    OP_DELETE, OP_PUT, ChangelogConfig, ChangelogStateHandle, ChangelogTracker,
)
from statekit.backends.common.key_layout import (
    KEY_GROUP_PREFIX_BYTES, VOID_NAMESPACE_PART, cell_key, decode_list, encode_list, key_group_bounds, key_group_prefix,
    prefix_upper_bound, split_cell_key, varint,
)
from statekit.backends.common.kv_bulk import (
    KVBulkAppendingState, KVBulkListState, KVBulkState, KVBulkValueState,
)
from statekit.backends.common.kv_states import (
    KVAggregatingState, KVListState, KVMapState, KVReducingState, KVState, KVValueState,
)
from statekit.backends.common.kv_store import KVTable, KVView
from statekit.backends.common.kv_timers import KVTimerQueue, delete_timer_cell, index_entries, index_table_name
from statekit.backends.common.migration import DROPPED, Migration
from statekit.backends.common.namespaces import encode_namespace
from statekit.backends.common.registration import RegisteredState, default_value
from statekit.backends.common.ttl import timestamp_of
from statekit.spi.backend import KeyedBackendParams, PendingSnapshot, StateSize, released_snapshot
from statekit.spi.descriptors import StateDescriptor, StateKind
from statekit.spi.errors import RestoreError, StateAccessError
from statekit.spi.handles import KeyGroupsStateHandle, StateHandle, StateMetaInfo
from statekit.spi.key_format import PLAIN_KEY_CLASSES, KeyBytes
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import VOID_NAMESPACE
from statekit.spi.storage import CheckpointStreams, StateScope

#: state kinds whose cell holds entries under a user key (map entries; timers by timestamp)
_CELLS_OF_ENTRIES = (StateKind.MAP, StateKind.TIMERS)
#: state kinds whose changed cells a delta writes as DELETE of the cell, then PUT of what it holds
_REWRITTEN_WHOLE = (StateKind.LIST, *_CELLS_OF_ENTRIES)
#: a changelog delta scans a key group when it holds at most this many entries per changed map
#: cell (a range read per cell costs about as much as scanning that many entries)
DELTA_SCAN_FACTOR = 16
#: at most this many stored-key heads are kept (``KVKeyedStateBackend._kg_heads``: about 100 bytes each)
MAX_KEY_HEADS = 4096
_STATE_CLASSES = {StateKind.VALUE: KVValueState, StateKind.LIST: KVListState, StateKind.MAP: KVMapState,
                  StateKind.REDUCING: KVReducingState, StateKind.AGGREGATING: KVAggregatingState}


class KVKeyedStateBackend(AbstractKeyedStateBackend):
    """The skeleton over a ``KVTable`` per state: a subclass provides ``_table``, ``_view`` and
    ``dispose``. TTL is implemented here (``common/ttl.py``); the factory passes its declared
    ``ttl`` and ``event_time_ttl`` capabilities as ``supports_ttl`` and ``supports_event_time_ttl``,
    the one source of truth."""

    backend_name = "kv"

    def __init__(self, params: KeyedBackendParams, changelog: ChangelogConfig = ChangelogConfig(),
                 supports_ttl: bool = True, snapshot_compression: str = DEFAULT_COMPRESSION,
                 supports_event_time_ttl: bool = False) -> None:
        super().__init__(params, changelog, supports_ttl, snapshot_compression, supports_event_time_ttl)
        self._key: Any = None
        self._key_group = -1
        #: the current key's stored-key prefix and its cell in the void namespace (the prefix and
        #: ``VOID_NAMESPACE_PART``), built by ``set_current_key`` (None before the first key, or if
        #: the key failed to serialize: ``current_key_prefix`` raises then); the states read them
        #: directly and call ``current_key_prefix`` / ``current_cell`` only when they are None
        self._prefix: bytes | None = None
        self._cell: bytes | None = None
        #: the stored-key prefix of each key group of the range, by key group
        self._kg_prefixes = {key_group: key_group_prefix(key_group) for key_group in self.key_group_range}
        #: per key group of the range, by key length: the stored key's head (key-group prefix and
        #: length varint) that ``set_current_key`` prepends to a key's bytes in one concatenation;
        #: filled as lengths are met, at most ``MAX_KEY_HEADS`` in all (``_key_head``)
        self._kg_heads: dict[int, dict[int, bytes]] = {key_group: {} for key_group in self.key_group_range}
        self._key_heads = 0
        #: the key serializer's bytes, unchecked: a key it rejects is serialized again, with its
        #: error, by ``current_key_prefix``
        self._serialize_key = self.key_serializer.unchecked_serializer()

    # --- the store, provided by subclasses
    @abstractmethod
    def _table(self, name: str) -> KVTable:
        """The table of state ``name``, created if missing."""

    @abstractmethod
    def _view(self) -> KVView:
        """A consistent view of all tables (the synchronous part of a full snapshot)."""

    #: how ``_table_sizes`` measures bytes (``StateSize.bytes_basis``)
    bytes_basis = "unknown"

    def _table_sizes(self) -> dict[str, StateSize] | None:
        """The size of each table the store holds, by table name, as ``StateSize``; None (this
        default): the store does not say, nor does ``state_sizes``."""
        return None

    def state_sizes(self) -> dict[str, StateSize] | None:
        """Each registered state's table's size (``_table_sizes``); a timer state's bytes include
        its index table's (``<state>/by-time``)."""
        tables = self._table_sizes()
        if tables is None:
            return None
        sizes = {}
        for name in self.state_names():
            size = tables.get(name, StateSize(0, 0, True, self.bytes_basis))
            index = tables.get(index_table_name(name))
            sizes[name] = size if index is None else replace(size, bytes=size.bytes + index.bytes)
        return sizes

    # --- current key
    def set_current_key(self, key: Any, key_group: int) -> None:
        try:
            heads = self._kg_heads[key_group]
        except KeyError:
            raise self._key_outside_range(key, key_group) from None
        self._key, self._key_group = key, key_group
        # a datetime, a tuple: as the key format stores it (a str, the common key, is tested first)
        if key.__class__ is not str and key.__class__ not in PLAIN_KEY_CLASSES:
            if key.__class__ is tuple:  # a key of several columns, looked into here (a call costs more)
                for part in key:
                    if part.__class__ not in PLAIN_KEY_CLASSES:
                        key = self.key_bytes.canonical(key)
                        break
            else:
                key = self.key_bytes.canonical(key)
        try:
            key_bytes = self._serialize_key(key)
        except Exception:  # noqa: BLE001 - raised again by the first state access, as before the key is used
            self._prefix = self._cell = None
            return
        try:
            prefix = heads[len(key_bytes)] + key_bytes
        except KeyError:
            prefix = self._key_head(key_group, len(key_bytes)) + key_bytes
        self._prefix = prefix
        self._cell = prefix + VOID_NAMESPACE_PART

    def _key_head(self, key_group: int, size: int) -> bytes:
        """The head of a stored key of ``size`` bytes in ``key_group``, kept in ``_kg_heads`` while
        fewer than ``MAX_KEY_HEADS`` are (keys of many lengths in many key groups build theirs each time)."""
        head = self._kg_prefixes[key_group] + varint(size)
        if self._key_heads < MAX_KEY_HEADS:
            self._kg_heads[key_group][size] = head
            self._key_heads += 1
        return head

    def current_key_prefix(self) -> bytes:
        """The stored-key prefix of the current key (raises if there is none, or the key does not serialize)."""
        prefix = self._prefix
        if prefix is None:
            if self._key_group < 0:
                raise StateAccessError("keyed state was accessed with no current key; call set_current_key first")
            self.key_bytes.serialize(self._key)  # raises what kept set_current_key from building it
            self.set_current_key(self._key, self._key_group)
            prefix = self._prefix
            if prefix is None:
                raise StateAccessError(f"the current key {self._key!r} does not serialize with {self.key_serializer!r}")
        return prefix

    def current_cell(self) -> bytes:
        """The current key's cell in the void namespace (raises as ``current_key_prefix``)."""
        self.current_key_prefix()
        return self._cell  # type: ignore[return-value]  # built with the prefix

    # --- states
    def _create_state(self, descriptor: StateDescriptor, registration: RegisteredState) -> KVState:
        table = self._table(descriptor.name)
        if descriptor.kind is StateKind.VALUE:
            return KVValueState(self, table, registration, default_value(descriptor))
        if descriptor.kind is StateKind.REDUCING:
            return KVReducingState(self, table, registration, descriptor.reduce_function)  # type: ignore[attr-defined]
        if descriptor.kind is StateKind.AGGREGATING:
            return KVAggregatingState(self, table, registration, descriptor.aggregate_function)  # type: ignore[attr-defined]
        return _STATE_CLASSES[descriptor.kind](self, table, registration)

    def _create_bulk_state(self, descriptor: StateDescriptor, registration: RegisteredState) -> KVBulkState | None:
        table = self._table(descriptor.name)
        kind = descriptor.kind
        if kind is StateKind.VALUE:
            return KVBulkValueState(self, table, registration, default_value(descriptor))
        if kind is StateKind.LIST:
            return KVBulkListState(self, table, registration)
        if kind is StateKind.REDUCING:
            return KVBulkAppendingState(self, table, registration, reduce_function=descriptor.reduce_function)  # type: ignore[attr-defined]
        if kind is StateKind.AGGREGATING:
            return KVBulkAppendingState(self, table, registration,
                                        aggregate_function=descriptor.aggregate_function)  # type: ignore[attr-defined]
        return None  # map state: the per-key loop

    def _create_timer_queue(self, registration: RegisteredState) -> KVTimerQueue:
        return KVTimerQueue(self, registration)

    def timer_cell_changed(self, name: str, cell: bytes) -> None:
        """A timer of ``cell`` (any key's) was added or removed: record it for changelog snapshots."""
        if self._changelog.enabled:
            key_group = int.from_bytes(cell[:KEY_GROUP_PREFIX_BYTES], "big")
            self._changelog.dirty[key_group - self.key_group_range.start].add((name, cell))

    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        return (key for key, _ in self.keys_and_key_groups(state_name, namespace))

    def keys_and_key_groups(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[tuple[Any, int]]:
        registration = self._registrations.get(state_name)
        if registration is None:
            return iter(())
        try:
            wanted = encode_namespace(namespace, registration.namespace_serializer)
        except StateAccessError:  # a namespace of no bytes, which no state can be in
            return iter(())
        lower, upper = key_group_bounds(self.key_group_range)
        return self._distinct_keys(self._table(state_name).items(lower, upper), wanted)

    def _distinct_keys(self, entries: Iterator[tuple[bytes, bytes]], namespace: bytes) -> Iterator[tuple[Any, int]]:
        previous = None
        deserialize = self.key_serializer.deserialize
        for stored, _ in entries:
            key_group, key, ns, _ = split_cell_key(stored)
            if ns == namespace and key != previous:
                previous = key
                yield deserialize(key), key_group

    # --- snapshots: full (canonical) or changelog (a new base, or a delta of the changed cells)
    def _full_snapshot(self, checkpoint_id: int) -> PendingSnapshot:
        view, metas = self._view(), self.state_metas()
        return CanonicalKVSnapshot(view, self.key_group_range, self.key_bytes, metas,
                                   expired=self.expired_now(metas), compression=self.snapshot_compression)

    def _changelog_snapshot(self, checkpoint_id: int, changed: list[set[Any]] | None) -> PendingSnapshot:
        view, metas = self._view(), self.state_metas()
        return ChangelogKVSnapshot(view, self.key_group_range, self.key_bytes, metas, checkpoint_id,
                                   self._changelog, changed, self.expired_now(metas), self.snapshot_compression)

    # --- restore
    def _delete_cells(self, key_group: int, batch: Any, rows: list[int]) -> None:
        kg = key_group_prefix(key_group)
        states, keys, namespaces = (batch.column(c).to_pylist() for c in ("state", "key", "namespace"))
        for i in rows:
            cell = cell_key(kg, keys[i], namespaces[i])
            if self._registrations[states[i]].kind is StateKind.TIMERS:
                delete_timer_cell(self._table(states[i]), self._table(index_table_name(states[i])), cell)
            else:
                self._table(states[i]).delete_range(cell, prefix_upper_bound(cell))

    def _load_batch(self, key_group: int, batch: Any) -> None:
        columns = batch.to_pydict()
        kg = key_group_prefix(key_group)
        states, keys, namespaces, user_keys, values = (columns["state"], columns["key"], columns["namespace"],
                                                       columns["user_key"], columns["value"])
        for name, start, end in state_runs(states):
            registration = self._registrations.get(name)
            if registration is None:
                raise RestoreError(f"snapshot rows for state {name!r}, which its handle does not describe")
            entries: list[tuple[bytes, bytes]] = []
            is_list = registration.kind is StateKind.LIST
            pending_cell, pending_elements = None, []  # list elements of one cell are adjacent
            for i in range(start, end):
                cell = cell_key(kg, keys[i], namespaces[i])
                if is_list:
                    if cell != pending_cell and pending_cell is not None:
                        entries.append((pending_cell, encode_list(pending_elements)))
                        pending_elements = []
                    pending_cell = cell
                    pending_elements.append(values[i])
                else:
                    entries.append((cell + (user_keys[i] or b""), values[i]))
            table = self._table(name)
            if pending_cell is not None:
                entries.append((pending_cell, encode_list(pending_elements)))
                # the rows of a list cell may span record batches: its first cell here continues
                # what the previous batch stored (a delta deletes a list cell before its PUT rows)
                held = table.get(entries[0][0])
                if held:
                    entries[0] = (entries[0][0], held + entries[0][1])
            table.put_many(entries)
            if registration.kind is StateKind.TIMERS:
                self._table(index_table_name(name)).put_many(index_entries(entries))
                queue = self._timer_queues.get(name)
                if isinstance(queue, KVTimerQueue):
                    queue.heads_changed()

    # --- migration: every stored value read by the old serializer, migrated and written by the new
    def _migrate(self, registration: RegisteredState, previous: TypeSerializer, migration: Migration) -> None:
        table, new = self._table(registration.name), registration.value_serializer

        def convert(data: bytes) -> bytes | None:
            value = migration(previous.deserialize(data))
            return None if value is DROPPED else new.serialize(value)

        for index in range(len(self.key_group_range)):
            key_group = self.key_group_range.start + index
            lower, upper = key_group_bounds(KeyGroupRange(key_group, key_group))
            rewritten: list[tuple[bytes, bytes | None]] = []
            for stored, data in table.items(lower, upper):
                if registration.kind is StateKind.LIST:
                    elements = [e for e in map(convert, decode_list(data)) if e is not None]
                    rewritten.append((stored, encode_list(elements) if elements else None))
                else:  # a value, an accumulator, or one map entry per stored cell
                    rewritten.append((stored, convert(data)))
            for stored, data in rewritten:
                if data is None:
                    table.delete(stored)
            kept = [(stored, data) for stored, data in rewritten if data is not None]
            if kept:
                table.put_many(kept)

    # --- TTL sweep: a range scan of the key group's cells, timestamps read from the stored bytes
    def _sweep_key_group(self, registration: RegisteredState, index: int, deadline: int) -> int:
        table = self._table(registration.name)
        lower, upper = key_group_bounds(KeyGroupRange(self.key_group_range.start + index,
                                                      self.key_group_range.start + index))
        return sum(self._sweep_entry(registration, table, stored, data, deadline)
                   for stored, data in table.items(lower, upper))

    def _sweep_entry(self, registration: RegisteredState, table: KVTable, stored: bytes, data: bytes,
                     deadline: int) -> int:
        if registration.kind is StateKind.LIST:
            elements = decode_list(data)
            alive = [element for element in elements if timestamp_of(element) > deadline]
            if len(alive) == len(elements):
                return 0
            if alive:
                table.put(stored, encode_list(alive))
            else:
                table.delete(stored)
            gone = len(elements) - len(alive)
        elif timestamp_of(data) > deadline:
            return 0
        else:
            table.delete(stored)
            gone = 1
        if self._changelog.enabled:
            key_group, key, namespace, _ = split_cell_key(stored)
            cell = cell_key(key_group_prefix(key_group), key, namespace)
            self._changelog.dirty[key_group - self.key_group_range.start].add((registration.name, cell))
        return gone


class ChangelogKVSnapshot(PendingSnapshot):
    """Writes a changelog base (all of the view) or a delta (the ``changed`` cells) in shared scope."""

    def __init__(self, view: KVView, key_groups: KeyGroupRange, key_bytes: KeyBytes,
                 metas: list[StateMetaInfo], checkpoint_id: int, tracker: ChangelogTracker,
                 changed: list[set[Any]] | None, expired: Mapping[str, int] | None = None,
                 compression: str = DEFAULT_COMPRESSION) -> None:
        self._full = CanonicalKVSnapshot(view, key_groups, key_bytes, metas, StateScope.SHARED, expired,
                                         compression)
        self._compression = compression
        self._view = view
        self._key_groups = key_groups
        self._key_bytes = key_bytes
        self._metas = metas
        self._checkpoint_id = checkpoint_id
        self._tracker = tracker
        self._chain = tracker.chain
        self._changed = changed

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        self._full.check_unreleased()  # the delta reads the same view
        if self._changed is None or self._chain is None:
            base = self._full.write(streams)
            handle = ChangelogStateHandle(self._key_groups, base) if isinstance(base, KeyGroupsStateHandle) else None
        else:
            try:
                handle = self._chain.extended(self._write_delta(streams))
            finally:
                self.release()
        if handle is not None:
            self._tracker.written(self._checkpoint_id, handle)
        return handle

    def _write_delta(self, streams: CheckpointStreams) -> KeyGroupsStateHandle | None:
        assert self._changed is not None
        kinds = {m.name: StateKind(m.kind) for m in self._metas}
        writer = CanonicalSnapshotWriter(streams.create_output(StateScope.SHARED, name="keyed-delta"),
                                         CHANGELOG_FORMAT, compression=self._compression)
        counts = {name: self._view.entry_count(name) for name in kinds}
        per_key_group = {name: None if count is None else count / len(self._key_groups)
                         for name, count in counts.items()}
        try:
            for index, key_group in enumerate(self._key_groups):
                by_state: dict[str, list[bytes]] = {}
                for name, cell in self._changed[index]:
                    by_state.setdefault(name, []).append(cell)
                for name, cells in sorted(by_state.items()):
                    self._write_cells(writer, key_group, name, kinds[name], sorted(cells), per_key_group[name])
            return writer.finish(self._key_groups, self._key_bytes.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise

    def _write_cells(self, writer: CanonicalSnapshotWriter, key_group: int, name: str, kind: StateKind,
                     cells: list[bytes], entries_per_key_group: float | None) -> None:
        """The changed cells of one state in one key group: the DELETEs of the cells gone or rewritten
        whole, then the PUTs of what they hold now (the cells are distinct, so a cell's DELETE still
        comes before its PUTs)."""
        changed = pa.array(cells, pa.binary())
        stored, values = self._entries_of(name, key_group, kind, cells, changed, entries_per_key_group)
        if kind in _REWRITTEN_WHOLE:
            deleted = changed
        elif len(stored) == len(changed):  # a cell is one key: every changed cell holds a value
            deleted = changed[:0]
        else:  # a PUT replaces a value cell: only the cells with no entry left are deleted
            deleted = changed.filter(pc.invert(pc.is_in(changed, value_set=stored)))
        if len(deleted):
            keys, namespaces, _ = split_cell_keys(deleted)
            writer.add_columns(key_group, name, keys, namespaces, None, b"", OP_DELETE)
        _write_entries(writer, key_group, name, kind, stored, values, OP_PUT)

    def _entries_of(self, name: str, key_group: int, kind: StateKind, cells: list[bytes],
                    changed: pa.Array, entries_per_key_group: float | None) -> tuple[pa.Array, pa.Array]:
        """The stored keys and values of the entries of ``cells`` (sorted, distinct; ``changed`` as
        an array), in key order: filtered at once from one scan of the key group where it holds
        few entries per changed cell, else read cell by cell (a cell without user keys is one key:
        ``KVView.entries_at`` reads them all at once). The scan is not tried where the state's key
        groups hold more entries than that on average (``entries_per_key_group``, if known)."""
        exact = kind not in _CELLS_OF_ENTRIES
        per_cell = self._view.key_read_cost if exact else DELTA_SCAN_FACTOR
        budget = per_cell * len(cells)
        lower, upper = key_group_bounds(KeyGroupRange(key_group, key_group))
        too_many = entries_per_key_group is not None and entries_per_key_group > budget
        columns = None if too_many else self._view.columns_upto(name, lower, upper, budget)
        if columns is None:
            if exact:
                stored, values = self._view.entries_at(name, cells)
            else:  # a cell's entries are the keys from the cell up to its prefix's upper bound (no
                # cell is a prefix of another: its parts are length-prefixed)
                entries = [e for cell in cells for e in self._view.items(name, cell, prefix_upper_bound(cell))]
                stored, values = [key for key, _ in entries], [value for _, value in entries]
            return pa.array(stored, pa.binary()), pa.array(values, pa.binary())
        stored_all = pa.array(columns[0], pa.binary())
        wanted = pc.is_in(cells_of(stored_all) if not exact else stored_all, value_set=changed)
        return stored_all.filter(wanted), pa.array(columns[1], pa.binary()).filter(wanted)

    def release(self) -> None:
        self._full.release()


class CanonicalKVSnapshot(PendingSnapshot):
    """Writes a ``KVView`` in the canonical format, key group by key group."""

    def __init__(self, view: KVView, key_groups: KeyGroupRange, key_bytes: KeyBytes,
                 metas: list[StateMetaInfo], scope: StateScope = StateScope.EXCLUSIVE,
                 expired: Mapping[str, int] | None = None, compression: str = DEFAULT_COMPRESSION) -> None:
        self._expired = expired
        self._compression = compression
        self._view = view
        self._key_groups = key_groups
        self._key_bytes = key_bytes
        self._metas = metas
        self._scope = scope

    def check_unreleased(self) -> None:
        if self._view is None:
            raise released_snapshot()

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        self.check_unreleased()
        if not self._metas:
            self.release()
            return None
        name = "keyed-base" if self._scope is StateScope.SHARED else "keyed"
        writer = CanonicalSnapshotWriter(streams.create_output(self._scope, name=name), expired=self._expired,
                                         compression=self._compression)
        kinds = {m.name: StateKind(m.kind) for m in self._metas}
        try:
            for key_group in self._key_groups:
                lower, upper = key_group_bounds(KeyGroupRange(key_group, key_group))
                for name, kind in kinds.items():
                    stored, values = self._view.columns(name, lower, upper)
                    for start in range(0, len(stored), MAX_BATCH_ROWS):
                        _write_entries(writer, key_group, name, kind,
                                       pa.array(stored[start:start + MAX_BATCH_ROWS], pa.binary()),
                                       pa.array(values[start:start + MAX_BATCH_ROWS], pa.binary()))
            return writer.finish(self._key_groups, self._key_bytes.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise
        finally:
            self.release()

    def release(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None  # type: ignore[assignment]


def _write_entries(writer: CanonicalSnapshotWriter, key_group: int, name: str, kind: StateKind,
                   stored: pa.Array, values: pa.Array, op: int | None = None) -> None:
    """Stored entries of one state in one key group (binary arrays) as canonical rows (a list
    cell: one row per element)."""
    if not len(stored):
        return
    keys, namespaces, user_keys = split_cell_keys(stored)
    if kind is StateKind.LIST:
        elements = [decode_list(value) for value in values.to_pylist()]
        rows = np.repeat(np.arange(len(elements)), [len(e) for e in elements])
        writer.add_columns(key_group, name, keys.take(rows), namespaces.take(rows), None,
                           pa.array([e for cell in elements for e in cell], pa.binary()), op)
    else:
        writer.add_columns(key_group, name, keys, namespaces, user_keys if kind in _CELLS_OF_ENTRIES else None,
                           values, op)
