"""The heap keyed state backend: all state as Python objects in dicts, by key group."""
from __future__ import annotations

from typing import Any, Iterator

from statekit.backends.common.canonical import CanonicalSnapshotWriter, read_key_groups
from statekit.backends.common.namespaces import decode_namespace, encode_namespace
from statekit.backends.common.operator_state import DefaultOperatorStateBackend
from statekit.backends.common.registration import RegisteredState, default_value, register
from statekit.backends.heap.state_table import KeyGroupMap, StateTable
from statekit.backends.heap.states import (
    HeapAggregatingState, HeapListState, HeapMapState, HeapReducingState, HeapState, HeapValueState,
)
from statekit.spi.backend import (
    Capabilities, KeyedBackendParams, KeyedStateBackend, OperatorBackendParams, OperatorStateBackend,
    PendingSnapshot, SnapshotOptions, StateBackend,
)
from statekit.spi.descriptors import StateDescriptor, StateKind
from statekit.spi.errors import RestoreError, StateAccessError
from statekit.spi.handles import KeyGroupsStateHandle, StateHandle
from statekit.spi.serializer import SerializerSnapshot, TypeSerializer, check_compatibility
from statekit.spi.state import State, VOID_NAMESPACE
from statekit.spi.storage import CheckpointStreams


class HeapStateBackend(StateBackend):
    """Keyed state in Python dicts: the fastest backend while state fits in memory."""

    name = "heap"
    capabilities = Capabilities(incremental_snapshots=False, async_snapshots=True, ttl=False)

    def create_keyed_backend(self, params: KeyedBackendParams) -> "HeapKeyedStateBackend":
        return HeapKeyedStateBackend(params)

    def create_operator_backend(self, params: OperatorBackendParams) -> OperatorStateBackend:
        return DefaultOperatorStateBackend(params)


class HeapKeyedStateBackend(KeyedStateBackend):
    def __init__(self, params: KeyedBackendParams) -> None:
        super().__init__(params)
        self._tables: dict[str, StateTable] = {}
        self._states: dict[str, HeapState] = {}
        self._num_key_groups = len(self.key_group_range)
        self._key: Any = None
        self._key_group = -1
        self._index = self._num_key_groups  # the NO_CURRENT_KEY slot of every StateTable
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
        table = self._tables.get(descriptor.name)
        registration = register(table.registration if table else None, descriptor, namespace_serializer,
                                HeapStateBackend.capabilities.ttl, HeapStateBackend.name)
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

    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        table = self._tables.get(state_name)
        return table.keys(namespace) if table is not None else iter(())

    def state_names(self) -> list[str]:
        return sorted(self._tables)

    # --- snapshots
    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        shared = {name: (table, *table.share()) for name, table in sorted(self._tables.items())
                  if not table.is_empty()}
        return _HeapPendingSnapshot(self, shared)

    def dispose(self) -> None:
        self._tables.clear()
        self._states.clear()

    # --- restore
    def _restore(self, params: KeyedBackendParams) -> None:
        if params.restore_streams is None:
            raise RestoreError("restore handles were given without the streams to read them")
        for handle in params.restore_handles:
            if not isinstance(handle, KeyGroupsStateHandle):
                raise RestoreError(f"the heap backend restores canonical snapshots, not {type(handle).__name__}; "
                                   f"take a savepoint with the backend that wrote it and restore from that")
            self._restore_handle(handle, params.restore_streams)

    def _restore_handle(self, handle: KeyGroupsStateHandle, streams: CheckpointStreams) -> None:
        check_compatibility("<keys>", "key", self.key_serializer,
                            SerializerSnapshot.from_json(handle.key_serializer))
        for meta in handle.states:
            if meta.name not in self._tables:
                self._tables[meta.name] = StateTable(RegisteredState.from_meta(meta), self.key_group_range)
        target = handle.restore_key_groups(self.key_group_range)
        key_cache: dict[bytes, Any] = {}
        for key_group, batch in read_key_groups(handle, streams, target):
            self._load_batch(key_group - self.key_group_range.start, batch, key_cache)

    def _load_batch(self, index: int, batch: Any, key_cache: dict[bytes, Any]) -> None:
        columns = batch.to_pydict()
        deserialize_key = self.key_serializer.deserialize
        run_start = 0
        states = columns["state"]
        n = len(states)
        while run_start < n:  # rows of one state are contiguous within a batch
            name = states[run_start]
            run_end = run_start
            while run_end < n and states[run_end] == name:
                run_end += 1
            table = self._tables.get(name)
            if table is None:
                raise RestoreError(f"snapshot rows for state {name!r}, which its handle does not describe")
            group = table.writable(index)
            _load_rows(table.registration, group, columns, run_start, run_end, key_cache, deserialize_key)
            run_start = run_end


def _load_rows(registration: RegisteredState, group: KeyGroupMap, columns: dict[str, list[Any]],
               start: int, end: int, key_cache: dict[bytes, Any], deserialize_key: Any) -> None:
    kind = registration.kind
    ns_serializer = registration.namespace_serializer
    value_of = registration.value_serializer.deserialize
    user_key_of = registration.user_key_serializer.deserialize if kind is StateKind.MAP else None
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
            entries.setdefault(key, {})[user_key_of(user_keys[i])] = value  # type: ignore[misc]
        else:
            entries[key] = value


class _HeapPendingSnapshot(PendingSnapshot):
    """Holds the key-group maps shared at the synchronous part; writes them canonically."""

    def __init__(self, backend: HeapKeyedStateBackend,
                 shared: dict[str, tuple[StateTable, list[KeyGroupMap], list[bool]]]) -> None:
        self._key_group_range = backend.key_group_range
        self._key_serializer = backend.key_serializer
        self._shared = shared
        self._metas = [table.registration.meta() for table, _, _ in shared.values()]
        self._registrations = {name: table.registration for name, (table, _, _) in shared.items()}

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        if not self._shared:
            return None
        writer = CanonicalSnapshotWriter(streams.create_output(name="keyed"))
        try:
            serialize_key = self._key_serializer.serialize
            for index, key_group in enumerate(self._key_group_range):
                key_cache: dict[Any, bytes] = {}
                for name, (_, view, _) in self._shared.items():
                    group = view[index]
                    if group:
                        _write_group(writer, key_group, name, self._registrations[name], group,
                                     key_cache, serialize_key)
            handle = writer.finish(self._key_group_range, self._key_serializer.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise
        finally:
            self.release()
        return handle

    def release(self) -> None:
        for table, view, owned in self._shared.values():
            table.unshare(owned, view)
        self._shared = {}


def _write_group(writer: CanonicalSnapshotWriter, key_group: int, name: str,
                 registration: RegisteredState, group: KeyGroupMap, key_cache: dict[Any, bytes],
                 serialize_key: Any) -> None:
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
            uk_serializer = registration.user_key_serializer
            for key, mapping in entries.items():
                key_bytes = _key_bytes(key, key_cache, serialize_key)
                keys.extend([key_bytes] * len(mapping))
                user_keys.extend(uk_serializer.serialize_many(mapping.keys()))
                values.extend(value_serializer.serialize_many(mapping.values()))
        else:
            keys = [_key_bytes(k, key_cache, serialize_key) for k in entries]
            values = value_serializer.serialize_many(entries.values())
        writer.add_rows(key_group, name, keys, [ns_bytes] * len(keys), user_keys, values)


def _key_bytes(key: Any, cache: dict[Any, bytes], serialize_key: Any) -> bytes:
    data = cache.get(key)
    if data is None:
        data = cache[key] = serialize_key(key)
    return data
