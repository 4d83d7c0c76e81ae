"""The heap keyed state backend: all state as Python objects in dicts, by key group."""
from __future__ import annotations

import time
from typing import Any, Iterator

from statekit.backends.common.canonical import CHANGELOG_FORMAT, CanonicalSnapshotWriter, read_key_groups, state_runs
from statekit.backends.common.changelog import (
    OP_DELETE, OP_PUT, ChangelogConfig, ChangelogStateHandle, ChangelogTracker, restore_chain, split_ops,
)
from statekit.backends.common.namespaces import decode_namespace, encode_namespace
from statekit.backends.common.operator_state import DefaultOperatorStateBackend
from statekit.backends.common.registration import RegisteredState, default_value, register
from statekit.backends.common.ttl import expiry_deadlines, ttl_state
from statekit.backends.heap.copies import UserKeys
from statekit.backends.heap.options import OPTIONS
from statekit.backends.heap.state_table import KeyGroupMap, StateTable
from statekit.backends.heap.states import (
    HeapAggregatingState, HeapListState, HeapMapState, HeapReducingState, HeapState, HeapValueState,
)
from statekit.spi.backend import (
    Capabilities, KeyedBackendParams, KeyedStateBackend, OperatorBackendParams, OperatorStateBackend,
    PendingSnapshot, SnapshotOptions, SnapshotType, StateBackend,
)
from statekit.spi.descriptors import StateDescriptor, StateKind
from statekit.spi.errors import RestoreError, StateAccessError
from statekit.spi.handles import KeyGroupsStateHandle, StateHandle
from statekit.spi.serializer import SerializerSnapshot, TypeSerializer, check_compatibility
from statekit.spi.state import State, VOID_NAMESPACE
from statekit.spi.storage import CheckpointStreams, StateScope


class HeapStateBackend(StateBackend):
    """Keyed state in Python dicts: the fastest backend while state fits in memory.
    Incremental snapshots are changelog deltas on a canonical base (``common.changelog``)."""

    name = "heap"
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=True)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.changelog = OPTIONS.parse(options).build(ChangelogConfig, "changelog.")

    def create_keyed_backend(self, params: KeyedBackendParams) -> "HeapKeyedStateBackend":
        return HeapKeyedStateBackend(params, self.changelog, supports_ttl=self.capabilities.ttl)

    def create_operator_backend(self, params: OperatorBackendParams) -> OperatorStateBackend:
        return DefaultOperatorStateBackend(params)


class HeapKeyedStateBackend(KeyedStateBackend):
    def __init__(self, params: KeyedBackendParams, changelog: ChangelogConfig = ChangelogConfig(),
                 supports_ttl: bool = True) -> None:
        super().__init__(params)
        #: TTL is implemented here (``common/ttl.py``); honoured when the factory declares ``ttl``
        self.supports_ttl = supports_ttl
        self._changelog = ChangelogTracker(self.key_group_range, changelog)
        self._tables: dict[str, StateTable] = {}
        self._states: dict[str, HeapState] = {}
        self._num_key_groups = len(self.key_group_range)
        self._key: Any = None
        self._key_group = -1
        self._index = self._num_key_groups  # the NO_CURRENT_KEY slot of every StateTable
        self._sweep_position = 0
        if params.restore_handles:
            self._restore(params)

    # --- current key
    def set_current_key(self, key: Any, key_group: int) -> None:
        index = key_group - self.key_group_range.start
        if not 0 <= index < self._num_key_groups:
            raise StateAccessError(
                f"key {key!r} is in key group {key_group}, outside this backend's range "
                f"{self.key_group_range}; the key group must be computed with the job's max parallelism")
        self._key, self._key_group, self._index = key, key_group, index

    # --- states
    def get_state(self, descriptor: StateDescriptor,
                  namespace_serializer: TypeSerializer | None = None) -> State:
        if descriptor.ttl is not None and self.supports_ttl:
            return ttl_state(descriptor, lambda inner: self._get_state(inner, namespace_serializer),
                             lambda: self.processing_time_ms)
        return self._get_state(descriptor, namespace_serializer)

    def _get_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None) -> State:
        table = self._tables.get(descriptor.name)
        registration = register(table.registration if table else None, descriptor, namespace_serializer,
                                self.supports_ttl, HeapStateBackend.name)
        if table is None:
            table = self._tables[descriptor.name] = StateTable(registration, self.key_group_range)
        table.registration = registration
        state = self._states.get(descriptor.name)
        if state is None:
            state = self._states[descriptor.name] = self._create_state(descriptor, table)
        return state

    def _create_state(self, descriptor: StateDescriptor, table: StateTable) -> HeapState:
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

    def sweep_expired(self, max_seconds: float) -> int:
        """Visit key groups of the states with TTL, from where the last sweep stopped, replacing
        entries that hold expired elements (never changing a held object in place: a pending
        snapshot may share it)."""
        deadlines = expiry_deadlines([t.registration.meta() for t in self._tables.values()], self.processing_time_ms)
        work = [(name, index) for name in sorted(deadlines) for index in range(self._num_key_groups)]
        if not work:
            return 0
        start = self._sweep_position % len(work)
        stop_at = time.monotonic() + max_seconds
        removed = 0
        for step in range(len(work)):
            name, index = work[(start + step) % len(work)]
            removed += self._sweep_key_group(self._tables[name], index, deadlines[name])
            if time.monotonic() >= stop_at:
                self._sweep_position = start + step + 1
                return removed
        self._sweep_position = start
        return removed

    def _sweep_key_group(self, table: StateTable, index: int, deadline: int) -> int:
        kind = table.registration.kind
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
            name = table.registration.name
            for namespace, key, remains in changes:
                entries = group[namespace]
                if remains is None:
                    del entries[key]
                    if not entries:
                        del group[namespace]
                else:
                    entries[key] = remains
                if self._changelog.enabled:
                    self._changelog.dirty[index].add((name, key, namespace))
        return removed

    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        table = self._tables.get(state_name)
        return table.keys(namespace) if table is not None else iter(())

    def state_names(self) -> list[str]:
        return sorted(self._tables)

    # --- snapshots
    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        shared = {name: (table, *table.share()) for name, table in sorted(self._tables.items())
                  if not table.is_empty() or options.incremental}
        if options.snapshot_type is SnapshotType.SAVEPOINT or not options.incremental:
            return _HeapPendingSnapshot(self, shared, checkpoint_id)
        base = self._changelog.needs_base()
        changed = self._changelog.capture(checkpoint_id)
        return _HeapPendingSnapshot(self, shared, checkpoint_id, incremental=True, changed=None if base else changed)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._changelog.complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._changelog.abort(checkpoint_id)

    def dispose(self) -> None:
        self._tables.clear()
        self._states.clear()

    # --- restore
    def _restore(self, params: KeyedBackendParams) -> None:
        if params.restore_streams is None:
            raise RestoreError("restore handles were given without the streams to read them")
        handles = list(params.restore_handles)
        for handle in handles:
            if not isinstance(handle, (KeyGroupsStateHandle, ChangelogStateHandle)):
                raise RestoreError(f"the heap backend restores canonical and changelog snapshots, not "
                                   f"{type(handle).__name__}; take a savepoint with the backend that wrote it "
                                   f"and restore from that")
            self._restore_handle(handle, params.restore_streams)
        if len(handles) == 1 and params.share_restored_files:
            self._changelog.adopt(handles[0], handles[0].key_group_range == self.key_group_range)

    def _restore_handle(self, handle: KeyGroupsStateHandle | ChangelogStateHandle, streams: CheckpointStreams) -> None:
        check_compatibility("<keys>", "key", self.key_serializer,
                            SerializerSnapshot.from_json(handle.key_serializer_snapshot()))
        for meta in handle.state_meta_infos():
            if meta.name not in self._tables:
                self._tables[meta.name] = StateTable(RegisteredState.from_meta(meta), self.key_group_range)
        key_cache: dict[bytes, Any] = {}
        start = self.key_group_range.start

        def load(key_group: int, batch: Any) -> None:
            self._load_batch(key_group - start, batch, key_cache)

        def apply_delta(key_group: int, batch: Any) -> None:
            deletes, puts = split_ops(batch)
            self._delete_cells(key_group - start, batch, deletes, key_cache)
            self._load_batch(key_group - start, puts, key_cache)

        if isinstance(handle, ChangelogStateHandle):
            restore_chain(handle, streams, self.key_group_range, load, apply_delta)
        else:
            for key_group, batch in read_key_groups(handle, streams, handle.restore_key_groups(self.key_group_range)):
                load(key_group, batch)

    def _delete_cells(self, index: int, batch: Any, rows: list[int], key_cache: dict[bytes, Any]) -> None:
        if not rows:
            return
        states, keys, namespaces = (batch.column(c).to_pylist() for c in ("state", "key", "namespace"))
        for i in rows:
            table = self._tables[states[i]]
            key = key_cache.get(keys[i])
            if key is None:
                key = key_cache[keys[i]] = self.key_serializer.deserialize(keys[i])
            namespace = decode_namespace(namespaces[i], table.registration.namespace_serializer)
            group = table.writable(index)
            entries = group.get(namespace)
            if entries is not None and entries.pop(key, None) is not None and not entries:
                del group[namespace]

    def _load_batch(self, index: int, batch: Any, key_cache: dict[bytes, Any]) -> None:
        columns = batch.to_pydict()
        deserialize_key = self.key_serializer.deserialize
        for name, start, end in state_runs(columns["state"]):
            table = self._tables.get(name)
            if table is None:
                raise RestoreError(f"snapshot rows for state {name!r}, which its handle does not describe")
            _load_rows(table, table.writable(index), columns, start, end, key_cache, deserialize_key)


def _load_rows(table: StateTable, group: KeyGroupMap, columns: dict[str, list[Any]],
               start: int, end: int, key_cache: dict[bytes, Any], deserialize_key: Any) -> None:
    registration = table.registration
    kind = registration.kind
    ns_serializer = registration.namespace_serializer
    value_of = registration.value_serializer.deserialize
    held_user_key = table.user_keys.held_from_bytes if table.user_keys is not None else None
    keys, namespaces, user_keys, values = (columns["key"], columns["namespace"], columns["user_key"],
                                           columns["value"])
    for i in range(start, end):
        key_bytes = keys[i]
        key = key_cache.get(key_bytes)
        if key is None:
            key = key_cache[key_bytes] = deserialize_key(key_bytes)
        namespace = decode_namespace(namespaces[i], ns_serializer)
        entries = group.get(namespace)
        if entries is None:
            entries = group[namespace] = {}
        value = value_of(values[i])
        if kind is StateKind.LIST:
            entries.setdefault(key, []).append(value)
        elif kind is StateKind.MAP:
            entries.setdefault(key, {})[held_user_key(user_keys[i])] = value  # type: ignore[misc]
        else:
            entries[key] = value


class _HeapPendingSnapshot(PendingSnapshot):
    """Holds the key-group maps shared at the synchronous part and writes them: a full canonical
    snapshot, or for incremental snapshots a new changelog base or a delta of ``changed`` cells."""

    def __init__(self, backend: HeapKeyedStateBackend,
                 shared: dict[str, tuple[StateTable, list[KeyGroupMap], list[bool]]], checkpoint_id: int,
                 incremental: bool = False, changed: list[set[Any]] | None = None) -> None:
        self._backend = backend
        self._checkpoint_id = checkpoint_id
        self._key_group_range = backend.key_group_range
        self._key_serializer = backend.key_serializer
        self._shared = shared
        self._metas = [table.registration.meta() for table, _, _ in shared.values()]
        self._expired = expiry_deadlines(self._metas, backend.processing_time_ms)
        self._registrations = {name: table.registration for name, (table, _, _) in shared.items()}
        self._user_keys = {name: table.user_keys for name, (table, _, _) in shared.items()}
        self._changelog = backend._changelog
        self._chain = self._changelog.chain
        self._changed = changed  # None: write a full snapshot (a new base when incremental)
        self._incremental = incremental

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
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
                                         expired=self._expired)
        try:
            serialize_key = self._key_serializer.serialize
            for index, key_group in enumerate(self._key_group_range):
                key_cache: dict[Any, bytes] = {}
                for name, (_, view, _) in self._shared.items():
                    group = view[index]
                    if group:
                        _write_group(writer, key_group, name, self._registrations[name], self._user_keys[name],
                                     group, key_cache, serialize_key)
            return writer.finish(self._key_group_range, self._key_serializer.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise

    def _write_delta(self, streams: CheckpointStreams) -> KeyGroupsStateHandle | None:
        assert self._changed is not None
        writer = CanonicalSnapshotWriter(streams.create_output(StateScope.SHARED, name="keyed-delta"),
                                         CHANGELOG_FORMAT)
        try:
            serialize_key = self._key_serializer.serialize
            for index, key_group in enumerate(self._key_group_range):
                cells = self._changed[index]
                if cells:
                    self._write_changed_cells(writer, index, key_group, cells, serialize_key)
            return writer.finish(self._key_group_range, self._key_serializer.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise

    def _write_changed_cells(self, writer: CanonicalSnapshotWriter, index: int, key_group: int,
                             cells: set[Any], serialize_key: Any) -> None:
        by_state: dict[str, list[tuple[Any, Any]]] = {}
        for name, key, namespace in cells:
            by_state.setdefault(name, []).append((key, namespace))
        key_cache: dict[Any, bytes] = {}
        for name, changed in sorted(by_state.items()):
            registration = self._registrations[name]
            view = self._shared[name][1][index]
            ns_serializer = registration.namespace_serializer
            keys = [_key_bytes(k, key_cache, serialize_key) for k, _ in changed]
            namespaces = [encode_namespace(ns, ns_serializer) for _, ns in changed]
            # a PUT replaces a value cell; list and map cells, and cells now gone, are deleted first
            replaced_by_put = registration.kind not in (StateKind.LIST, StateKind.MAP)
            current: KeyGroupMap = {}
            deleted = [False] * len(changed)
            for i, (key, namespace) in enumerate(changed):
                entries = view.get(namespace)
                if entries is not None and key in entries:
                    current.setdefault(namespace, {})[key] = entries[key]
                    deleted[i] = not replaced_by_put
                else:
                    deleted[i] = True
            rows = [i for i, d in enumerate(deleted) if d]
            if rows:
                writer.add_rows(key_group, name, [keys[i] for i in rows], [namespaces[i] for i in rows], None,
                                [b""] * len(rows), [OP_DELETE] * len(rows))
            if current:
                _write_group(writer, key_group, name, registration, self._user_keys[name], current, key_cache,
                             serialize_key, OP_PUT)

    def release(self) -> None:
        for table, view, owned in self._shared.values():
            table.unshare(owned, view)
        self._shared = {}


def _write_group(writer: CanonicalSnapshotWriter, key_group: int, name: str, registration: RegisteredState,
                 user_keys_of: UserKeys | None, group: KeyGroupMap, key_cache: dict[Any, bytes],
                 serialize_key: Any, op: int | None = None) -> None:
    kind = registration.kind
    value_serializer = registration.value_serializer
    for namespace, entries in group.items():
        ns_bytes = encode_namespace(namespace, registration.namespace_serializer)
        keys: list[bytes] = []
        user_keys: list[bytes] | None = None
        if kind is StateKind.LIST:
            values = []
            for key, elements in entries.items():
                key_bytes = _key_bytes(key, key_cache, serialize_key)
                keys.extend([key_bytes] * len(elements))
                values.extend(value_serializer.serialize_many(elements))
        elif kind is StateKind.MAP:
            user_keys, values = [], []
            user_key_bytes = user_keys_of.to_bytes  # type: ignore[union-attr]
            for key, mapping in entries.items():
                key_bytes = _key_bytes(key, key_cache, serialize_key)
                keys.extend([key_bytes] * len(mapping))
                user_keys.extend([user_key_bytes(k) for k in mapping])
                values.extend(value_serializer.serialize_many(mapping.values()))
        else:
            keys = [_key_bytes(k, key_cache, serialize_key) for k in entries]
            values = value_serializer.serialize_many(entries.values())
        writer.add_rows(key_group, name, keys, [ns_bytes] * len(keys), user_keys, values,
                        None if op is None else [op] * len(keys))


def _key_bytes(key: Any, cache: dict[Any, bytes], serialize_key: Any) -> bytes:
    data = cache.get(key)
    if data is None:
        data = cache[key] = serialize_key(key)
    return data
