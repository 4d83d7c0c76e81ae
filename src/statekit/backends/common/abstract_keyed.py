"""``AbstractKeyedStateBackend``: what every keyed backend built from statekit's parts shares (Flink's
``AbstractKeyedStateBackend``), so that a backend provides only its data structures.

The skeleton owns the registrations of states (``register``, TTL wrapping), the snapshot strategy
(a full canonical snapshot for savepoints and full checkpoints; for incremental ones a changelog
base when the chain needs one, else a delta of the cells changed since the last completed
checkpoint), restores from canonical snapshots and changelog chains (any backend's), and the
TTL sweep's bookkeeping (which key group of which state is next, within a time budget).

A subclass provides: ``set_current_key`` (the hot path stays its own), ``_create_state``,
``_create_timer_queue`` (timers are a state of kind ``timers``, snapshotted like the others), the two
snapshot writers ``_full_snapshot`` and ``_changelog_snapshot``, the restore loaders
``_load_batch`` and ``_delete_cells``, ``_sweep_key_group``, ``keys`` and ``dispose``; optionally
``_state_known`` to build per-state structures as states become known.
"""
from __future__ import annotations

import random
import time
from abc import abstractmethod
from typing import Any, Iterable, Sequence

from statekit.backends.common.canonical import DEFAULT_COMPRESSION, KeyGroupsOf, read_key_groups
from statekit.backends.common.changelog import (
    ChangelogConfig, ChangelogStateHandle, ChangelogTracker, restore_chain, split_ops,
)
from statekit.backends.common.migration import Migration, value_migration
from statekit.backends.common.registration import RegisteredState, register
from statekit.backends.common.ttl import TtlClocks, expiry_deadlines, ttl_state
from statekit.spi.backend import KeyedBackendParams, KeyedStateBackend, PendingSnapshot, SnapshotOptions, SnapshotType
from statekit.spi.bulk_state import BulkState, per_key_bulk_state
from statekit.spi.descriptors import StateDescriptor, TimerStateDescriptor, TtlTimeCharacteristic
from statekit.spi.errors import IncompatibleSerializerError, RestoreError, SerializationError, StateAccessError
from statekit.spi.handles import KeyedStateHandle, KeyGroupsStateHandle, StateHandle, StateMetaInfo
from statekit.spi.key_format import read_key_serializer
from statekit.spi.serializer import TypeSerializer, check_compatibility
from statekit.spi.state import State
from statekit.spi.storage import CheckpointStreams
from statekit.spi.timers import TimerQueue



def streams_to_read(streams: CheckpointStreams | None) -> CheckpointStreams:
    """The restore streams, which restoring any handle needs."""
    if streams is None:
        raise RestoreError("restore handles were given without the streams to read them")
    return streams

class AbstractKeyedStateBackend(KeyedStateBackend):
    #: the backend's name in error messages
    backend_name = "keyed"

    def __init__(self, params: KeyedBackendParams, changelog: ChangelogConfig = ChangelogConfig(),
                 supports_ttl: bool = True, snapshot_compression: str = DEFAULT_COMPRESSION,
                 supports_event_time_ttl: bool = False) -> None:
        super().__init__(params)
        #: how the canonical writer compresses full, savepoint and changelog snapshots
        self.snapshot_compression = snapshot_compression
        #: TTL is implemented for every backend (``common/ttl.py``); honoured when the factory
        #: declares the ``ttl`` capability, which passes it here
        self.supports_ttl = supports_ttl
        #: event-time TTL likewise, when the factory declares ``event_time_ttl``
        self.supports_event_time_ttl = supports_event_time_ttl
        #: changelog incremental snapshots (unused by backends with native incremental snapshots)
        self._changelog = ChangelogTracker(self.key_group_range, changelog)
        self._registrations: dict[str, RegisteredState] = {}
        #: the restored states' metas as their snapshots gave them: every snapshot restored together must agree
        self._adopted_metas: dict[str, StateMetaInfo] = {}
        self._states: dict[str, tuple[StateDescriptor, State]] = {}  # by name: the descriptor it was made for
        self._timer_queues: dict[str, TimerQueue] = {}
        self._num_key_groups = len(self.key_group_range)
        #: the first key group of the range: ``set_current_key`` subtracts it (the hot path)
        self._kg_start = self.key_group_range.start
        #: the next (state, key group) pair of the TTL sweep; None until this backend first sweeps
        self._sweep_position: int | None = None

    def _key_outside_range(self, key: Any, key_group: int) -> StateAccessError:
        return StateAccessError(
            f"key {key!r} is in key group {key_group}, outside this backend's range {self.key_group_range}; "
            f"the key group must be computed with the job's max parallelism")

    # --- states
    def get_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None = None) -> State:
        if descriptor.ttl is not None and self.supports_ttl:
            return ttl_state(descriptor, lambda inner: self._registered_state(inner, namespace_serializer), self)
        return self._registered_state(descriptor, namespace_serializer)

    def _registered_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None) -> State:
        registration = self._register(descriptor, namespace_serializer)
        cached = self._states.get(descriptor.name)
        # the state follows the descriptor it is asked with: a backend kept for the next epoch serves
        # a new function instance, whose descriptors bind its own reduce/aggregate function and default
        if cached is not None and (cached[0] is descriptor or cached[0] == descriptor):
            return cached[1]
        state = self._create_state(descriptor, registration)
        self._states[descriptor.name] = (descriptor, state)
        return state

    def get_bulk_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None = None) -> BulkState:
        """The backend's own bulk state (``_create_bulk_state``); for a state with TTL, or a kind
        the backend has none for, a loop over a per-key state object of its own (so that its
        namespace is not the per-key state's)."""
        if descriptor.ttl is not None and self.supports_ttl:
            return per_key_bulk_state(self, ttl_state(
                descriptor, lambda inner: self._create_state(inner, self._register(inner, namespace_serializer)),
                self))
        self._registered_state(descriptor, namespace_serializer)  # registered, and the kind checked
        registration = self._registrations[descriptor.name]
        bulk = self._create_bulk_state(descriptor, registration)
        return bulk if bulk is not None else per_key_bulk_state(self, self._create_state(descriptor, registration))

    def _create_bulk_state(self, descriptor: StateDescriptor, registration: RegisteredState) -> BulkState | None:
        """The backend's bulk implementation of a registered state (None: none for this kind)."""
        return None

    def _register(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None) -> RegisteredState:
        registration = register(self._registrations.get(descriptor.name), descriptor, namespace_serializer,
                                self.supports_ttl, self.backend_name, self.supports_event_time_ttl)
        if registration.ttl_time is TtlTimeCharacteristic.EVENT_TIME:
            self.uses_element_time = True
        if registration.migrated_from is not None:
            previous = registration.migrated_from
            try:
                self._migrate(registration, previous, self._value_migration(registration))
            except SerializationError as exc:
                raise IncompatibleSerializerError(
                    f"state {descriptor.name!r} cannot be migrated from {type(previous).__name__} to "
                    f"{type(registration.value_serializer).__name__}: {exc}. Declare the state's type (type=...) "
                    f"or a serializer that writes its values (serializer=PickleSerializer() keeps pickle)") from exc
            self._changelog.rebase()
            registration.migrated_from = registration.migrated_meta = None
        self._registrations[descriptor.name] = registration
        self._state_known(registration)
        return registration

    def _value_migration(self, registration: RegisteredState) -> Migration:
        """The migration of a registered state's restored values: entries that get TTL are written
        now (on the TTL's clock); entries that lose it are dropped when expired (on the old TTL's)."""
        assert registration.migrated_from is not None and registration.migrated_meta is not None
        descriptor = registration.descriptor
        ttl = descriptor.ttl if descriptor is not None else None
        written = TtlClocks.of(ttl, self).write() if ttl is not None else self.processing_time_ms
        expired_by = self.expired_now([registration.migrated_meta]).get(registration.name)
        return value_migration(registration.migrated_from, registration.value_serializer, written, expired_by)

    def _migrate(self, registration: RegisteredState, previous: TypeSerializer, migration: Migration) -> None:
        """Rewrite every value of a restored state (each list element, each map value) as
        ``migration`` of it, read by ``previous`` and written by the registered value serializer,
        before the state is used; remove those it gives as ``DROPPED`` (``migration.py``)."""
        raise IncompatibleSerializerError(
            f"state {registration.name!r} must be migrated to its new value serializer, which the "
            f"{self.backend_name} backend cannot do: keep the serializer as it was")

    def create_timer_queue(self, name: str, namespace_serializer: TypeSerializer | None = None) -> TimerQueue:
        queue = self._timer_queues.get(name)
        if queue is None:
            restored = self._registrations.get(name)
            if namespace_serializer is None and restored is not None:
                namespace_serializer = restored.namespace_serializer
            registration = self._register(TimerStateDescriptor(name), namespace_serializer)
            queue = self._timer_queues[name] = self._create_timer_queue(registration)
        return queue

    @abstractmethod
    def _create_timer_queue(self, registration: RegisteredState) -> TimerQueue:
        """The queue over the timers of a newly registered timer state (restored ones included)."""

    def _state_known(self, registration: RegisteredState) -> None:
        """A state was registered or restored (its registration may be a new object)."""

    @abstractmethod
    def _create_state(self, descriptor: StateDescriptor, registration: RegisteredState) -> State:
        """The state object of a newly registered state."""

    def state_names(self) -> list[str]:
        return sorted(self._registrations)

    def state_metas(self) -> list[StateMetaInfo]:
        return [self._registrations[name].meta() for name in sorted(self._registrations)]

    # --- snapshots
    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        if options.snapshot_type is SnapshotType.SAVEPOINT or not options.incremental:
            if options.snapshot_type is SnapshotType.CHECKPOINT:
                self._changelog.full(checkpoint_id)
            return self._full_snapshot(checkpoint_id)
        base = self._changelog.needs_base()
        changed = self._changelog.capture(checkpoint_id)
        return self._changelog_snapshot(checkpoint_id, None if base else changed)

    @abstractmethod
    def _full_snapshot(self, checkpoint_id: int) -> PendingSnapshot:
        """The synchronous part of a full canonical snapshot (expired TTL entries left out:
        ``self.expired_now()``)."""

    @abstractmethod
    def _changelog_snapshot(self, checkpoint_id: int, changed: list[set[Any]] | None) -> PendingSnapshot:
        """The synchronous part of an incremental snapshot: a new changelog base (``changed`` is
        None) or a delta of the ``changed`` cells of each key group, extending the chain."""

    def expired_now(self, metas: Sequence[StateMetaInfo] | None = None) -> dict[str, int]:
        """Per state with TTL, the latest write time that is expired now (``ttl.expiry_deadlines``:
        processing-time TTL by the processing time, event-time TTL by the watermark)."""
        return expiry_deadlines(self.state_metas() if metas is None else metas, self.processing_time_ms,
                                self.watermark_ms)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._changelog.complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._changelog.abort(checkpoint_id)

    # --- restore from canonical snapshots and changelog chains
    def restore_canonical(self, handles: Sequence[StateHandle], streams: CheckpointStreams | None) -> None:
        for handle in handles:
            if not isinstance(handle, (KeyGroupsStateHandle, ChangelogStateHandle)):
                raise RestoreError(f"the {self.backend_name} backend restores canonical and changelog snapshots (and "
                                   f"its own native ones), not {type(handle).__name__}; take a savepoint with the "
                                   f"backend that wrote it and restore from that")
            streams = streams_to_read(streams)
            self.adopt_state_metas(handle.state_meta_infos(), handle.key_serializer_snapshot())
            if isinstance(handle, ChangelogStateHandle):
                restore_chain(handle, streams, self.key_group_range, self._load_batch, self._apply_delta,
                              self._key_groups_of())
            else:
                for key_group, batch in read_key_groups(handle, streams, handle.restore_key_groups(self.key_group_range),
                                                        self._key_groups_of()):
                    self._load_batch(key_group, batch)
        self._adopt_chain(handles)

    def _key_groups_of(self) -> KeyGroupsOf | None:
        """Stored keys with their key groups as the engine computes them (``KeyedBackendParams.key_groups_of``)."""
        key_groups_of = self.params.key_groups_of
        if key_groups_of is None:
            return None
        deserialize = self.key_bytes.serializer.deserialize_many

        def of(stored: Any) -> Iterable[tuple[Any, int]]:
            keys = deserialize(stored.to_pylist())
            return zip(keys, key_groups_of(keys))
        return of

    def resume_bookkeeping(self, handles: Sequence[KeyedStateHandle]) -> None:
        """Local recovery: the store already holds the state of ``handles``; learn its states and
        changelog chain from them without loading anything."""
        for handle in handles:
            self.adopt_state_metas(handle.state_meta_infos(), handle.key_serializer_snapshot())
        self._adopt_chain(handles)

    def adopt_state_metas(self, metas: Sequence[StateMetaInfo], key_serializer: dict[str, Any] | None) -> None:
        """Know the restored states (kind, serializers) and key format before the job registers them again."""
        if key_serializer is not None:
            previous, key_format = read_key_serializer(key_serializer)
            check_compatibility("<keys>", "key", self.key_serializer, previous)
            self.key_bytes = self.key_bytes.restored(key_format)
        for meta in metas:
            adopted = self._adopted_metas.get(meta.name)
            if meta.name not in self._registrations:
                registration = self._registrations[meta.name] = RegisteredState.from_meta(meta)
                self._adopted_metas[meta.name] = meta
                self._state_known(registration)
            elif adopted is not None and adopted != meta:
                raise RestoreError(
                    f"state {meta.name!r} was written by other serializers in the snapshots this subtask restores "
                    f"together ({adopted.serializers} and {meta.serializers}): its subtasks migrated it "
                    f"where they registered it, and some did not register it. Restore at the parallelism that "
                    f"wrote it, and register every state in open(), so that every subtask migrates it")

    def _adopt_chain(self, handles: Sequence[StateHandle]) -> None:
        if len(handles) == 1 and self.params.share_restored_files and isinstance(handles[0], KeyedStateHandle):
            self._changelog.adopt(handles[0], handles[0].key_group_range == self.key_group_range)

    def _apply_delta(self, key_group: int, batch: Any) -> None:
        deletes, puts = split_ops(batch)
        if deletes:
            self._delete_cells(key_group, batch, deletes)
        self._load_batch(key_group, puts)

    @abstractmethod
    def _load_batch(self, key_group: int, batch: Any) -> None:
        """Put a canonical record batch of ``key_group`` into the store."""

    @abstractmethod
    def _delete_cells(self, key_group: int, batch: Any, rows: list[int]) -> None:
        """Remove the (state, key, namespace) cells of ``rows`` of a changelog delta batch."""

    # --- TTL sweep
    def sweep_expired(self, max_seconds: float) -> int:
        """Visit (state with TTL, key group) pairs from where the last sweep stopped (the first sweep
        of a backend: from a pair the processing time picks), until every pair was visited once or
        ``max_seconds`` passed."""
        if max_seconds <= 0:
            return 0  # no sweep: expired entries go when accessed and from full snapshots
        deadlines = self.expired_now()
        work = [(name, index) for name in sorted(deadlines) for index in range(self._num_key_groups)]
        if not work:
            return 0
        if self._sweep_position is None:
            # a backend restored for this epoch does not know where the last epoch's sweep stopped:
            # start where the epoch's processing time picks (the same when the epoch is replayed), so
            # that the sweeps of successive epochs reach every pair instead of always the first ones
            self._sweep_position = random.Random(self.processing_time_ms).randrange(len(work))
        start = self._sweep_position % len(work)
        stop_at = time.monotonic() + max_seconds
        removed = 0
        for step in range(len(work)):
            name, index = work[(start + step) % len(work)]
            removed += self._sweep_key_group(self._registrations[name], index, deadlines[name])
            if time.monotonic() >= stop_at:
                self._sweep_position = start + step + 1
                return removed
        return removed

    @abstractmethod
    def _sweep_key_group(self, registration: RegisteredState, index: int, deadline: int) -> int:
        """Remove the state's entries of key group ``key_group_range.start + index`` written at or
        before ``deadline``, recording the changes for changelog snapshots; how many went."""
