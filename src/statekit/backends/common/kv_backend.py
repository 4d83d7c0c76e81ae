"""A keyed state backend over any ordered byte key-value store.

Subclasses provide the store (``_table``, ``_view``, ``dispose``); this class provides the state
kinds, the key layout, key iteration, and full snapshots and restores in the canonical format.
The RocksDB and LMDB backends are built on it, and so can a plugin's.
"""
from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any, Iterator, Mapping, Sequence

from statekit.backends.common.canonical import CHANGELOG_FORMAT, CanonicalSnapshotWriter, read_key_groups, state_runs
from statekit.backends.common.changelog import (
    OP_DELETE, OP_PUT, ChangelogConfig, ChangelogStateHandle, ChangelogTracker, restore_chain, split_ops,
)
from statekit.backends.common.key_layout import (
    cell_key, decode_list, encode_list, key_group_bounds, key_group_prefix, prefix_upper_bound, split_cell_key,
    varint,
)
from statekit.backends.common.kv_states import (
    KVAggregatingState, KVListState, KVMapState, KVReducingState, KVState, KVValueState,
)
from statekit.backends.common.kv_store import KVTable, KVView
from statekit.backends.common.namespaces import encode_namespace
from statekit.backends.common.registration import RegisteredState, default_value, register
from statekit.backends.common.ttl import expiry_deadlines, timestamp_of, ttl_state
from statekit.spi.backend import KeyedBackendParams, KeyedStateBackend, PendingSnapshot, SnapshotOptions, SnapshotType
from statekit.spi.descriptors import StateDescriptor, StateKind
from statekit.spi.errors import RestoreError, StateAccessError
from statekit.spi.handles import KeyedStateHandle, KeyGroupsStateHandle, StateHandle, StateMetaInfo
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.serializer import SerializerSnapshot, TypeSerializer, check_compatibility
from statekit.spi.state import State, VOID_NAMESPACE
from statekit.spi.storage import CheckpointStreams, StateScope

_STATE_CLASSES = {StateKind.VALUE: KVValueState, StateKind.LIST: KVListState, StateKind.MAP: KVMapState,
                  StateKind.REDUCING: KVReducingState, StateKind.AGGREGATING: KVAggregatingState}


class KVKeyedStateBackend(KeyedStateBackend):
    #: the backend's name in error messages
    backend_name = "kv"
    #: the KV layer implements TTL for every backend built on it (``common/ttl.py``): a factory
    #: of such a backend declares ``Capabilities(ttl=True)``
    supports_ttl = True

    def __init__(self, params: KeyedBackendParams, changelog: ChangelogConfig = ChangelogConfig()) -> None:
        super().__init__(params)
        #: changelog incremental snapshots (unused by backends with native incremental snapshots)
        self._changelog = ChangelogTracker(self.key_group_range, changelog)
        self._registrations: dict[str, RegisteredState] = {}
        self._states: dict[str, KVState] = {}
        self._key: Any = None
        self._key_group = -1
        self._prefix: bytes | None = None
        start = self.key_group_range.start
        self._kg_prefixes = [key_group_prefix(start + i) for i in range(len(self.key_group_range))]
        self._sweep_cursor: tuple[str, bytes] = ("", b"")  # (state, the next stored key to visit)

    # --- the store, provided by subclasses
    @abstractmethod
    def _table(self, name: str) -> KVTable:
        """The table of state ``name``, created if missing."""

    @abstractmethod
    def _view(self) -> KVView:
        """A consistent view of all tables (the synchronous part of a full snapshot)."""

    # --- current key
    def set_current_key(self, key: Any, key_group: int) -> None:
        index = key_group - self.key_group_range.start
        if not 0 <= index < len(self._kg_prefixes):
            raise StateAccessError(
                f"key {key!r} is in key group {key_group}, outside this backend's range "
                f"{self.key_group_range}; the key group must be computed with the job's max parallelism")
        self._key, self._key_group, self._prefix = key, key_group, None

    def current_key_prefix(self) -> bytes:
        """The stored-key prefix of the current key, serialized once per key change."""
        prefix = self._prefix
        if prefix is None:
            if self._key_group < 0:
                raise StateAccessError("keyed state was accessed with no current key; call set_current_key first")
            key_bytes = self.key_serializer.serialize(self._key)
            prefix = self._prefix = (self._kg_prefixes[self._key_group - self.key_group_range.start]
                                     + varint(len(key_bytes)) + key_bytes)
        return prefix

    # --- states
    def get_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None = None) -> State:
        if descriptor.ttl is not None and self.supports_ttl:
            return ttl_state(descriptor, lambda inner: self._get_state(inner, namespace_serializer),
                             lambda: self.processing_time_ms)
        return self._get_state(descriptor, namespace_serializer)

    def _get_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None) -> State:
        registration = register(self._registrations.get(descriptor.name), descriptor, namespace_serializer,
                                self.supports_ttl, self.backend_name)
        self._registrations[descriptor.name] = registration
        state = self._states.get(descriptor.name)
        if state is None:
            table = self._table(descriptor.name)
            cls = _STATE_CLASSES[descriptor.kind]
            if descriptor.kind is StateKind.VALUE:
                state = KVValueState(self, table, registration, default_value(descriptor))
            elif descriptor.kind is StateKind.REDUCING:
                state = KVReducingState(self, table, registration, descriptor.reduce_function)  # type: ignore[attr-defined]
            elif descriptor.kind is StateKind.AGGREGATING:
                state = KVAggregatingState(self, table, registration, descriptor.aggregate_function)  # type: ignore[attr-defined]
            else:
                state = cls(self, table, registration)
            self._states[descriptor.name] = state
        return state

    def sweep_expired(self, max_seconds: float) -> int:
        """Range-scan the states with TTL, from where the last sweep stopped, deleting expired
        entries (a list keeps its live elements); reads timestamps from the stored bytes."""
        deadlines = expiry_deadlines(self.state_metas(), self.processing_time_ms)
        if not deadlines:
            return 0
        lower, upper = key_group_bounds(self.key_group_range)
        names = sorted(deadlines)
        name, resume = self._sweep_cursor if self._sweep_cursor[0] in deadlines else (names[0], lower)
        stop_at = time.monotonic() + max_seconds
        removed = 0
        for step in range(len(names) + 1):
            current = names[(names.index(name) + step) % len(names)]
            kind = self._registrations[current].kind
            table = self._table(current)
            visited = 0
            for stored, data in table.items(resume if step == 0 else lower, upper):
                removed += self._sweep_entry(current, kind, table, stored, data, deadlines[current])
                visited += 1
                if visited % 256 == 0 and time.monotonic() >= stop_at:
                    self._sweep_cursor = (current, stored + b"\x00")
                    return removed
            if time.monotonic() >= stop_at:
                break
        self._sweep_cursor = (names[(names.index(name) + 1) % len(names)], lower)
        return removed

    def _sweep_entry(self, name: str, kind: StateKind, table: KVTable, stored: bytes, data: bytes,
                     deadline: int) -> int:
        if kind is StateKind.LIST:
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
            self._changelog.dirty[key_group - self.key_group_range.start].add((name, cell))
        return gone

    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        registration = self._registrations.get(state_name)
        if registration is None:
            return iter(())
        wanted = encode_namespace(namespace, registration.namespace_serializer)
        lower, upper = key_group_bounds(self.key_group_range)
        return self._distinct_keys(self._table(state_name).items(lower, upper), wanted)

    def _distinct_keys(self, entries: Iterator[tuple[bytes, bytes]], namespace: bytes) -> Iterator[Any]:
        previous = None
        deserialize = self.key_serializer.deserialize
        for stored, _ in entries:
            _, key, ns, _ = split_cell_key(stored)
            if ns == namespace and key != previous:
                previous = key
                yield deserialize(key)

    def state_names(self) -> list[str]:
        return sorted(self._registrations)

    def state_metas(self) -> list[StateMetaInfo]:
        return [self._registrations[name].meta() for name in sorted(self._registrations)]

    # --- snapshots: full (canonical) or changelog (a new base, or a delta of the changed cells)
    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        view, metas = self._view(), self.state_metas()
        expired = expiry_deadlines(metas, self.processing_time_ms)
        if options.snapshot_type is SnapshotType.SAVEPOINT or not options.incremental:
            return CanonicalKVSnapshot(view, self.key_group_range, self.key_serializer, metas, expired=expired)
        base = self._changelog.needs_base()
        changed = self._changelog.capture(checkpoint_id)
        return ChangelogKVSnapshot(view, self.key_group_range, self.key_serializer, metas, checkpoint_id,
                                   self._changelog, None if base else changed, expired)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._changelog.complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._changelog.abort(checkpoint_id)

    # --- restore from canonical snapshots and changelog chains
    def restore_canonical(self, handles: Sequence[StateHandle], streams: CheckpointStreams | None) -> None:
        for handle in handles:
            if not isinstance(handle, (KeyGroupsStateHandle, ChangelogStateHandle)):
                raise RestoreError(f"the {self.backend_name} backend cannot restore a {type(handle).__name__} here")
            if streams is None:
                raise RestoreError("restore handles were given without the streams to read them")
            self.adopt_state_metas(handle.state_meta_infos(), handle.key_serializer_snapshot())
            if isinstance(handle, ChangelogStateHandle):
                restore_chain(handle, streams, self.key_group_range, self._load_batch, self._apply_delta)
            else:
                for key_group, batch in read_key_groups(handle, streams, handle.restore_key_groups(self.key_group_range)):
                    self._load_batch(key_group, batch)
        self._adopt_chain(handles)

    def resume_bookkeeping(self, handles: Sequence[KeyedStateHandle]) -> None:
        """Local recovery: the store already holds the state of ``handles``; learn its states and
        changelog chain from them without loading anything."""
        for handle in handles:
            self.adopt_state_metas(handle.state_meta_infos(), handle.key_serializer_snapshot())
        self._adopt_chain(handles)

    def _adopt_chain(self, handles: Sequence[StateHandle]) -> None:
        if len(handles) == 1 and self.params.share_restored_files:
            self._changelog.adopt(handles[0], handles[0].key_group_range == self.key_group_range)  # type: ignore[attr-defined]

    def _apply_delta(self, key_group: int, batch: Any) -> None:
        deletes, puts = split_ops(batch)
        if deletes:
            kg = key_group_prefix(key_group)
            states, keys, namespaces = (batch.column(c).to_pylist() for c in ("state", "key", "namespace"))
            for i in deletes:
                cell = cell_key(kg, keys[i], namespaces[i])
                self._table(states[i]).delete_range(cell, prefix_upper_bound(cell))
        self._load_batch(key_group, puts)

    def adopt_state_metas(self, metas: Sequence[StateMetaInfo], key_serializer: dict[str, Any] | None) -> None:
        """Know the restored states (kind, serializers) before the job registers them again."""
        if key_serializer is not None:
            check_compatibility("<keys>", "key", self.key_serializer, SerializerSnapshot.from_json(key_serializer))
        for meta in metas:
            if meta.name not in self._registrations:
                self._registrations[meta.name] = RegisteredState.from_meta(meta)

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
            if pending_cell is not None:
                entries.append((pending_cell, encode_list(pending_elements)))
            self._table(name).put_many(entries)


class ChangelogKVSnapshot(PendingSnapshot):
    """Writes a changelog base (all of the view) or a delta (the ``changed`` cells) in shared scope."""

    def __init__(self, view: KVView, key_groups: KeyGroupRange, key_serializer: TypeSerializer,
                 metas: list[StateMetaInfo], checkpoint_id: int, tracker: ChangelogTracker,
                 changed: list[set[Any]] | None, expired: Mapping[str, int] | None = None) -> None:
        self._full = CanonicalKVSnapshot(view, key_groups, key_serializer, metas, StateScope.SHARED, expired)
        self._view = view
        self._key_groups = key_groups
        self._key_serializer = key_serializer
        self._metas = metas
        self._checkpoint_id = checkpoint_id
        self._tracker = tracker
        self._chain = tracker.chain
        self._changed = changed

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
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
                                         CHANGELOG_FORMAT)
        try:
            for index, key_group in enumerate(self._key_groups):
                by_state: dict[str, list[bytes]] = {}
                for name, cell in self._changed[index]:
                    by_state.setdefault(name, []).append(cell)
                for name, cells in sorted(by_state.items()):
                    kind = kinds[name]
                    for cell in sorted(cells):
                        entries = list(self._view.items(name, cell, prefix_upper_bound(cell)))
                        if not entries or kind in (StateKind.LIST, StateKind.MAP):  # a PUT replaces a value cell
                            _, key, namespace, _ = split_cell_key(cell)
                            writer.add_rows(key_group, name, [key], [namespace], None, [b""], [OP_DELETE])
                        _write_key_group(writer, key_group, name, kind, iter(entries), OP_PUT)
            return writer.finish(self._key_groups, self._key_serializer.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise

    def release(self) -> None:
        self._full.release()


class CanonicalKVSnapshot(PendingSnapshot):
    """Writes a ``KVView`` in the canonical format, key group by key group."""

    def __init__(self, view: KVView, key_groups: KeyGroupRange, key_serializer: TypeSerializer,
                 metas: list[StateMetaInfo], scope: StateScope = StateScope.EXCLUSIVE,
                 expired: Mapping[str, int] | None = None) -> None:
        self._expired = expired
        self._view = view
        self._key_groups = key_groups
        self._key_serializer = key_serializer
        self._metas = metas
        self._scope = scope

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        if not self._metas:
            self.release()
            return None
        name = "keyed-base" if self._scope is StateScope.SHARED else "keyed"
        writer = CanonicalSnapshotWriter(streams.create_output(self._scope, name=name), expired=self._expired)
        kinds = {m.name: StateKind(m.kind) for m in self._metas}
        try:
            for key_group in self._key_groups:
                lower, upper = key_group_bounds(KeyGroupRange(key_group, key_group))
                for name, kind in kinds.items():
                    _write_key_group(writer, key_group, name, kind, self._view.items(name, lower, upper))
            return writer.finish(self._key_groups, self._key_serializer.snapshot(), self._metas)
        except BaseException:
            writer.abort()
            raise
        finally:
            self.release()

    def release(self) -> None:
        if self._view is not None:
            self._view.release()
            self._view = None  # type: ignore[assignment]


def _write_key_group(writer: CanonicalSnapshotWriter, key_group: int, name: str, kind: StateKind,
                     entries: Iterator[tuple[bytes, bytes]], op: int | None = None) -> None:
    keys: list[bytes] = []
    namespaces: list[bytes] = []
    user_keys: list[bytes | None] = []
    values: list[bytes] = []
    for stored, value in entries:
        _, key, namespace, user_key = split_cell_key(stored)
        if kind is StateKind.LIST:
            elements = decode_list(value)
            keys.extend([key] * len(elements))
            namespaces.extend([namespace] * len(elements))
            user_keys.extend([None] * len(elements))
            values.extend(elements)
        else:
            keys.append(key)
            namespaces.append(namespace)
            user_keys.append(user_key if kind is StateKind.MAP else None)
            values.append(value)
    if keys:
        writer.add_rows(key_group, name, keys, namespaces, user_keys, values, None if op is None else [op] * len(keys))


