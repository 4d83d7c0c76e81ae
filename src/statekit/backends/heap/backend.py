"""The heap keyed state backend: all state as Python objects in dicts, by key group."""
from __future__ import annotations

from itertools import compress, repeat
from operator import is_not, itemgetter, not_
from typing import Any, Iterator

import pyarrow as pa

from statekit.backends.common.abstract_keyed import AbstractKeyedStateBackend, streams_to_read
from statekit.backends.common.canonical import (
    CHANGELOG_FORMAT, DEFAULT_COMPRESSION, CanonicalSnapshotWriter, state_runs,
)
from statekit.backends.common.key_layout import timestamp_of_bytes
from statekit.backends.common.changelog import OP_DELETE, OP_PUT, ChangelogConfig, ChangelogStateHandle
from statekit.backends.common.operator_state import DefaultOperatorStateBackend
from statekit.backends.common.migration import DROPPED, Migration
from statekit.backends.common.registration import RegisteredState, default_value
from statekit.backends.heap.bulk import (
    HeapBulkAppendingState, HeapBulkListState, HeapBulkState, HeapBulkValueState,
)
from statekit.backends.heap.native_snapshot import NativeHeapSnapshot, NativeHeapStateHandle
from statekit.backends.heap.native_snapshot import restore as restore_native
from statekit.backends.heap.options import OPTIONS
from statekit.backends.heap.sizes import state_size
from statekit.backends.heap.snapshot_columns import StateColumns, key_group_runs
from statekit.backends.heap.state_table import KeyGroupMap, SharedTables, SharedTablesSnapshot, StateTable
from statekit.backends.heap.states import (
    HeapAggregatingState, HeapListState, HeapMapState, HeapReducingState, HeapState, HeapValueState,
)
from statekit.backends.heap.timers import HeapTimerQueue
from statekit.spi.backend import (
    Capabilities, KeyedBackendParams, OperatorBackendParams, OperatorStateBackend, PendingSnapshot, SnapshotFormat,
    SnapshotOptions, SnapshotType, StateBackend, StateSize,
)
from statekit.spi.descriptors import StateDescriptor, StateKind
from statekit.spi.errors import RestoreError
from statekit.spi.handles import KeyGroupsStateHandle, StateHandle
from statekit.spi.key_groups import canonical_key
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import VOID_NAMESPACE
from statekit.spi.storage import CheckpointStreams, StateScope

_GONE = object()  # a changed cell's key that its key group no longer holds


class HeapStateBackend(StateBackend):
    """Keyed state in Python dicts: the fastest backend while state fits in memory.
    Incremental snapshots are changelog deltas on a canonical base (``common.changelog``); full
    checkpoints may be native, the key-group maps pickled (``native_snapshot``)."""

    name = "heap"
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=True, event_time_ttl=True,
                                native_snapshots=True)
    native_snapshots_run_code = True

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        values = OPTIONS.parse(options)
        self.changelog = values.build(ChangelogConfig, "changelog.")
        self.snapshot_compression: str = values["snapshot-compression"]

    def create_keyed_backend(self, params: KeyedBackendParams) -> "HeapKeyedStateBackend":
        return HeapKeyedStateBackend(params, self.changelog, supports_ttl=self.capabilities.ttl,
                                     snapshot_compression=self.snapshot_compression,
                                     supports_event_time_ttl=self.capabilities.event_time_ttl)

    def create_operator_backend(self, params: OperatorBackendParams) -> OperatorStateBackend:
        return DefaultOperatorStateBackend(params)


class HeapKeyedStateBackend(AbstractKeyedStateBackend):
    backend_name = "heap"

    def __init__(self, params: KeyedBackendParams, changelog: ChangelogConfig = ChangelogConfig(),
                 supports_ttl: bool = True, snapshot_compression: str = DEFAULT_COMPRESSION,
                 supports_event_time_ttl: bool = True) -> None:
        super().__init__(params, changelog, supports_ttl, snapshot_compression, supports_event_time_ttl)
        self._tables: dict[str, StateTable] = {}
        self._key: Any = None
        self._key_group = -1
        self._index = self._num_key_groups  # the NO_CURRENT_KEY slot of every StateTable
        self._key_cache: dict[bytes, Any] = {}  # deserialized keys while restoring
        native = [h for h in params.restore_handles if isinstance(h, NativeHeapStateHandle)]
        for handle in native:
            self.adopt_state_metas(handle.states, handle.key_serializer)
        if native:
            restore_native(native, streams_to_read(params.restore_streams), self.key_group_range, self._tables)
        canonical = [h for h in params.restore_handles if not isinstance(h, NativeHeapStateHandle)]
        if canonical:
            self.restore_canonical(canonical, params.restore_streams)
            self._key_cache = {}

    # --- current key
    def set_current_key(self, key: Any, key_group: int) -> None:
        index = key_group - self._kg_start
        if not 0 <= index < self._num_key_groups:
            raise self._key_outside_range(key, key_group)
        self._key, self._key_group, self._index = key, key_group, index

    # --- states
    def _state_known(self, registration: RegisteredState) -> None:
        table = self._tables.get(registration.name)
        if table is None:
            self._tables[registration.name] = StateTable(registration, self.key_group_range)
            return
        restored, table.registration = table.registration, registration
        if registration.kind is not StateKind.TIMERS and \
                not registration.value_serializer.decodes_like(restored.value_serializer):
            # the same bytes, read as the objects the registered serializer reads
            old, new = restored.value_serializer, registration.value_serializer
            table.map_values(lambda value: new.deserialize(old.serialize(value)))

    def _migrate(self, registration: RegisteredState, previous: TypeSerializer, migration: Migration) -> None:
        table = self._tables[registration.name]
        table.map_values(migration, dropped=DROPPED)
        table.registration = registration

    def _create_state(self, descriptor: StateDescriptor, registration: RegisteredState) -> HeapState:
        table = self._tables[descriptor.name]
        kind = descriptor.kind
        if kind is StateKind.VALUE:
            return HeapValueState(self, table, default_value(descriptor))
        if kind is StateKind.LIST:
            return HeapListState(self, table)
        if kind is StateKind.MAP:
            return HeapMapState(self, table)
        if kind is StateKind.REDUCING:
            return HeapReducingState(self, table, descriptor.reduce_function)  # type: ignore[attr-defined]
        return HeapAggregatingState(self, table, descriptor.aggregate_function)  # type: ignore[attr-defined]

    def _create_bulk_state(self, descriptor: StateDescriptor, registration: RegisteredState) -> HeapBulkState | None:
        table = self._tables[descriptor.name]
        kind = descriptor.kind
        if kind is StateKind.VALUE:
            return HeapBulkValueState(self, table, default_value(descriptor))
        if kind is StateKind.LIST:
            return HeapBulkListState(self, table)
        if kind is StateKind.REDUCING:
            return HeapBulkAppendingState(self, table, reduce_function=descriptor.reduce_function)  # type: ignore[attr-defined]
        if kind is StateKind.AGGREGATING:
            return HeapBulkAppendingState(self, table, aggregate_function=descriptor.aggregate_function)  # type: ignore[attr-defined]
        return None  # map state: the per-key loop

    def _create_timer_queue(self, registration: RegisteredState) -> HeapTimerQueue:
        return HeapTimerQueue(self, self._tables[registration.name])

    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        table = self._tables.get(state_name)
        return table.keys(namespace) if table is not None else iter(())

    def keys_and_key_groups(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[tuple[Any, int]]:
        table = self._tables.get(state_name)
        start = self.key_group_range.start
        return iter([(key, start + index) for key, index in table.keys_by_group(namespace)] if table else ())

    # --- snapshots: the key-group maps are shared with the pending snapshot (copy-on-write)
    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        if (options.snapshot_type is SnapshotType.CHECKPOINT and not options.incremental
                and options.format is SnapshotFormat.NATIVE):
            self._changelog.full(checkpoint_id)
            return NativeHeapSnapshot(self._share_tables(), self.key_group_range, self.state_metas(),
                                      self.key_bytes.snapshot().to_json())
        return super().snapshot(checkpoint_id, options)

    def _share_tables(self, empty_too: bool = False) -> SharedTables:
        """The synchronous part of a snapshot: every state's key-group maps, shared (a full snapshot
        leaves empty states out; a changelog delta needs them, to delete what they held)."""
        return {name: (table, *table.share()) for name, table in sorted(self._tables.items())
                if empty_too or not table.is_empty()}

    def _full_snapshot(self, checkpoint_id: int) -> PendingSnapshot:
        return _HeapPendingSnapshot(self, self._share_tables(), checkpoint_id)

    def _changelog_snapshot(self, checkpoint_id: int, changed: list[set[Any]] | None) -> PendingSnapshot:
        return _HeapPendingSnapshot(self, self._share_tables(empty_too=True), checkpoint_id, incremental=True,
                                    changed=changed)

    def state_sizes(self) -> dict[str, StateSize]:
        """Exact entries, bytes sampled (``sizes.py``)."""
        return {name: state_size(table, self.key_bytes) for name, table in sorted(self._tables.items())}

    def dispose(self) -> None:
        for table in self._tables.values():
            table.dispose()  # the state objects handed out fail from now on, as do keys() and snapshots

    # --- TTL sweep: entries are replaced, never changed in place (a pending snapshot may share them)
    def _sweep_key_group(self, registration: RegisteredState, index: int, deadline: int) -> int:
        table = self._tables[registration.name]
        kind = registration.kind
        changes: list[tuple[Any, Any, Any]] = []  # (namespace, key, what remains or None)
        removed = 0
        for namespace, entries in table.groups[index].items():
            for key, held in entries.items():
                if kind is StateKind.LIST:
                    remains: Any = [entry for entry in held if entry[0] > deadline]
                    gone = len(held) - len(remains)
                elif kind is StateKind.MAP:
                    remains = {user_key: entry for user_key, entry in held.items() if entry[0] > deadline}
                    gone = len(held) - len(remains)
                else:
                    remains, gone = (held, 0) if held[0] > deadline else (None, 1)
                if gone:
                    changes.append((namespace, key, remains or None))
                    removed += gone
        if changes:
            group = table.writable(index)
            for namespace, key, remains in changes:
                entries = group[namespace]
                if remains is None:
                    del entries[key]
                    if not entries:
                        del group[namespace]
                else:
                    entries[key] = remains
                if self._changelog.enabled:
                    self._changelog.dirty[index].add((registration.name, key, namespace))
        return removed

    # --- restore
    def _delete_cells(self, key_group: int, batch: Any, rows: list[int]) -> None:
        index = key_group - self.key_group_range.start
        key_cache = self._key_cache
        states, keys, namespaces = (batch.column(c).to_pylist() for c in ("state", "key", "namespace"))
        for i in rows:
            table = self._tables[states[i]]
            key = key_cache.get(keys[i])
            if key is None:
                key = key_cache[keys[i]] = self._deserialize_key(keys[i])
            namespace = table.namespaces.held_from_bytes(namespaces[i])
            group = table.writable(index)
            entries = group.get(namespace)
            if entries is not None and entries.pop(key, None) is not None and not entries:
                del group[namespace]

    def _deserialize_key(self, key_bytes: bytes) -> Any:
        """A restored key as the runtime gives keys (``canonical_key``: one NaN object, which a dict
        finds again; the key bytes of a NaN do not say which object it was)."""
        return canonical_key(self.key_serializer.deserialize(key_bytes))

    def _load_batch(self, key_group: int, batch: Any) -> None:
        index = key_group - self.key_group_range.start
        columns = batch.to_pydict()
        for name, start, end in state_runs(columns["state"]):
            table = self._tables.get(name)
            if table is None:
                raise RestoreError(f"snapshot rows for state {name!r}, which its handle does not describe")
            _load_rows(table, table.writable(index), columns, start, end, self._key_cache, self._deserialize_key)


def _load_rows(table: StateTable, group: KeyGroupMap, columns: dict[str, list[Any]],
               start: int, end: int, key_cache: dict[bytes, Any], deserialize_key: Any) -> None:
    registration = table.registration
    kind = registration.kind
    held_namespace = table.namespaces.held_from_bytes
    timers = kind is StateKind.TIMERS
    value_of = None if timers else registration.value_serializer.deserialize
    held_user_key = table.user_keys.held_from_bytes if table.user_keys is not None else None
    keys, namespaces, user_keys, values = (columns["key"], columns["namespace"], columns["user_key"],
                                           columns["value"])
    for i in range(start, end):
        key_bytes = keys[i]
        key = key_cache.get(key_bytes)
        if key is None:
            key = key_cache[key_bytes] = deserialize_key(key_bytes)
        namespace = held_namespace(namespaces[i])
        entries = group.get(namespace)
        if entries is None:
            entries = group[namespace] = {}
        if timers:
            entries.setdefault(key, set()).add(timestamp_of_bytes(user_keys[i]))
            continue
        value = value_of(values[i])  # type: ignore[misc]
        if kind is StateKind.LIST:
            entries.setdefault(key, []).append(value)
        elif kind is StateKind.MAP:
            entries.setdefault(key, {})[held_user_key(user_keys[i])] = value  # type: ignore[misc]
        else:
            entries[key] = value


class _HeapPendingSnapshot(SharedTablesSnapshot):
    """Holds the key-group maps shared at the synchronous part and writes them: a full canonical
    snapshot, or for incremental snapshots a new changelog base or a delta of ``changed`` cells."""

    def __init__(self, backend: HeapKeyedStateBackend, shared: SharedTables, checkpoint_id: int,
                 incremental: bool = False, changed: list[set[Any]] | None = None) -> None:
        super().__init__(shared)
        self._backend = backend
        self._checkpoint_id = checkpoint_id
        self._key_group_range = backend.key_group_range
        self._key_bytes = backend.key_bytes
        self._metas = [table.registration.meta() for table, _, _ in shared.values()]
        self._expired = backend.expired_now(self._metas)
        self._registrations = {name: table.registration for name, (table, _, _) in shared.items()}
        self._namespaces = {name: table.namespaces for name, (table, _, _) in shared.items()}
        self._columns = {name: StateColumns(table.registration, table.namespaces, table.user_keys, backend.key_bytes)
                         for name, (table, _, _) in shared.items()}
        self._changelog = backend._changelog
        self._chain = self._changelog.chain
        self._changed = changed  # None: write a full snapshot (a new base when incremental)
        self._incremental = incremental
        self._compression = backend.snapshot_compression

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        self._check_unreleased()
        try:
            if self._changed is not None and self._chain is not None:
                delta = self._write_delta(streams)
                handle: StateHandle | None = self._chain.extended(delta)
            else:
                base = self._write_full(streams, incremental_base=self._incremental)
                handle = ChangelogStateHandle(self._key_group_range, base) if base and self._incremental else base
        finally:
            self.release()
        if isinstance(handle, ChangelogStateHandle):
            self._changelog.written(self._checkpoint_id, handle)
        return handle

    def _write_full(self, streams: CheckpointStreams, incremental_base: bool) -> KeyGroupsStateHandle | None:
        if not any(any(view) for _, view, _ in self._shared.values()):
            return None
        scope = StateScope.SHARED if incremental_base else StateScope.EXCLUSIVE
        writer = CanonicalSnapshotWriter(streams.create_output(scope, name="keyed-base" if incremental_base else "keyed"),
                                         expired=self._expired, compression=self._compression)
        try:
            views = {name: view for name, (_, view, _) in self._shared.items()}
            for run in key_group_runs(list(views.values()), len(self._key_group_range)):
                rows = {name: self._columns[name].rows([view[index] for index in run]) for name, view in views.items()}
                for position, index in enumerate(run):
                    key_group = self._key_group_range.start + index
                    for name in views:
                        for namespace_rows in rows[name][position]:
                            namespace_rows.write(writer, key_group, name)
            return writer.finish(self._key_group_range, self._key_bytes.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise

    def _write_delta(self, streams: CheckpointStreams) -> KeyGroupsStateHandle | None:
        assert self._changed is not None
        writer = CanonicalSnapshotWriter(streams.create_output(StateScope.SHARED, name="keyed-delta"),
                                         CHANGELOG_FORMAT, compression=self._compression)
        try:
            for index, key_group in enumerate(self._key_group_range):
                cells = self._changed[index]
                if cells:
                    self._write_changed_cells(writer, index, key_group, cells)
            return writer.finish(self._key_group_range, self._key_bytes.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise

    def _write_changed_cells(self, writer: CanonicalSnapshotWriter, index: int, key_group: int,
                             cells: set[Any]) -> None:
        by_state: dict[str, dict[Any, list[Any]]] = {}  # state -> namespace -> changed keys
        for name, key, namespace in cells:
            by_state.setdefault(name, {}).setdefault(namespace, []).append(key)
        for name, changed in sorted(by_state.items(), key=itemgetter(0)):
            registration = self._registrations[name]
            view = self._shared[name][1][index]
            namespace_bytes = self._namespaces[name].to_bytes
            # a PUT replaces a value cell; list and map cells, and cells now gone, are deleted first
            replaced_by_put = registration.kind not in (StateKind.LIST, StateKind.MAP, StateKind.TIMERS)
            current: KeyGroupMap = {}
            deleted: list[Any] = []
            deleted_namespaces: list[bytes] = []
            for namespace, keys in changed.items():  # each key looked up in C (``map``)
                held = list(map(view.get(namespace, {}).get, keys, repeat(_GONE)))
                present = list(map(is_not, held, repeat(_GONE)))
                if any(present):
                    current[namespace] = dict(zip(compress(keys, present), compress(held, present)))
                gone = list(compress(keys, map(not_, present))) if replaced_by_put else keys
                deleted += gone
                deleted_namespaces += repeat(namespace_bytes(namespace), len(gone))
            if deleted:
                writer.add_columns(key_group, name, self._key_bytes.serialize_arrow(deleted),
                                   pa.array(deleted_namespaces, pa.binary()), None, b"", OP_DELETE)
            if current:
                for namespace_rows in self._columns[name].rows([current])[0]:
                    namespace_rows.write(writer, key_group, name, OP_PUT)
