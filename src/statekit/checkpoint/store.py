"""Completed checkpoints of one job: commit, retention and the lifetime of shared files.

``CheckpointStore`` is the coordinator's single entry point (Flink's
``CompletedCheckpointStore`` plus ``SharedStateRegistry``):

* ``add`` commits a checkpoint (its ``_metadata`` last), then keeps the newest
  ``num_retained`` and disposes the rest;
* a shared file (incremental snapshots) records the last checkpoint that referenced it and is
  deleted once it is older than every retained checkpoint;
* the registry is rebuilt from the retained ``_metadata`` files when a coordinator starts, so it
  survives restarts;
* files of a snapshot restored in **no-claim** mode (the default) are never deleted; in
  **claim** mode that snapshot's shared files are adopted and follow retention. When the
  no-claim snapshot is one of the job's own checkpoints, every later checkpoint records its id
  (``NO_CLAIM_KEPT``), so the coordinators of later epochs keep it too;
* with a ``JobOwnership``, every commit first checks that this run still owns the job and
  records the run in the checkpoint, and a fenced run removes nothing (``checkpoint.ownership``).
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, replace
from typing import Iterable, Iterator

from statekit.checkpoint.metadata import CheckpointMetadata, SubtaskState, read_metadata
from statekit.checkpoint.ownership import JobOwnership
from statekit.spi.errors import ConfigurationError, CorruptStateError, RestoreError, StatekitError
from statekit.spi.handles import StreamStateHandle
from statekit.spi.storage import CheckpointStorageAccess, CompletedCheckpointPointer

log = logging.getLogger(__name__)
DEFAULT_NUM_RETAINED = 3
#: checkpoint property: whether its epoch started from empty state (restored nothing); a replay of
#: that epoch may start from empty state again (``CheckpointStore.check_fresh_start``)
FRESH_START = "fresh_start"
#: checkpoint property: the id of the checkpoint of the job its epoch restored as the latest one before
#: it (None: it restored none, or a snapshot given explicitly); a replay of the epoch restores the same
#: one or none (``CheckpointStore.latest_before``)
RESTORE_POINT = "restore_point"
#: checkpoint property: ids of the job's own checkpoints restored from in no-claim mode, which no
#: later coordinator may delete (each new checkpoint carries the list forward)
NO_CLAIM_KEPT = "no_claim_kept"


class RestoreMode(str, enum.Enum):
    NO_CLAIM = "no-claim"  # never delete the restored snapshot's files
    CLAIM = "claim"  # the job owns the restored snapshot's files from now on


@dataclass(frozen=True)
class CompletedCheckpoint:
    pointer: CompletedCheckpointPointer
    metadata: CheckpointMetadata

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id


def stream_handles(metadata: CheckpointMetadata) -> Iterator[StreamStateHandle]:
    for operator in metadata.operators.values():
        yield from subtask_stream_handles(operator.subtasks)


def subtask_stream_handles(subtasks: Iterable[SubtaskState]) -> Iterator[StreamStateHandle]:
    for subtask in subtasks:
        for handle in subtask.keyed:
            yield from handle.stream_handles()
        if subtask.operator is not None:
            yield from subtask.operator.stream_handles()


def _key(handle: StreamStateHandle) -> str:
    return handle.stored_as or handle.checksum


def _retained_metadata(access: CheckpointStorageAccess, pointer: CompletedCheckpointPointer) -> CheckpointMetadata:
    """The metadata of a retained checkpoint; when it is damaged, the error says how the job goes
    on without it (a restore path cannot: the store reads every retained checkpoint first)."""
    try:
        return read_metadata(access.read_metadata(pointer), pointer)
    except CorruptStateError as exc:
        raise CorruptStateError(
            f"{exc}. The job reads the _metadata of every checkpoint it retains when it starts, so it cannot start "
            f"while this one is damaged: move {pointer.external_pointer} out of the job's directory, and the job "
            f"continues from its latest other checkpoint (a streaming query then refuses to roll back past "
            f"micro-batches Spark committed unless spark.statekit.restore.path names the snapshot to continue "
            f"from)") from exc


class SharedStateRegistry:
    """Shared file -> the newest checkpoint id that references it."""

    def __init__(self) -> None:
        self.last_used: dict[str, int] = {}
        self._handles: dict[str, StreamStateHandle] = {}
        self.protected: set[str] = set()

    def register(self, checkpoint_id: int, handles: Iterable[StreamStateHandle]) -> None:
        for handle in handles:
            key = _key(handle)
            self._handles[key] = handle
            if self.last_used.get(key, -1) < checkpoint_id:
                self.last_used[key] = checkpoint_id

    def unused_before(self, lowest_retained: int, held: frozenset[str] = frozenset()) -> list[StreamStateHandle]:
        """Unregister and return the files no checkpoint from ``lowest_retained`` on uses, but
        those ``held``."""
        dropped = [k for k, last in self.last_used.items()
                   if last < lowest_retained and k not in self.protected and k not in held]
        for key in dropped:
            del self.last_used[key]
        return [self._handles.pop(key) for key in dropped]


class CheckpointStore:
    def __init__(self, access: CheckpointStorageAccess, num_retained: int = DEFAULT_NUM_RETAINED,
                 restored_from: CompletedCheckpoint | None = None,
                 restore_mode: RestoreMode = RestoreMode.NO_CLAIM, ownership: JobOwnership | None = None) -> None:
        if not isinstance(num_retained, int) or num_retained < 1:
            raise ConfigurationError(f"spark.statekit.checkpoint.num-retained must be a positive integer, "
                                     f"got {num_retained!r}")
        self.access = access
        self.num_retained = num_retained
        self.ownership = ownership
        self.registry = SharedStateRegistry()
        self._retained: list[CompletedCheckpoint] = []
        #: checkpoints retention dropped whose deletion failed: deleted again by the next ``add``, and
        #: their shared files kept until then (their ``_metadata`` may still be there: complete to a reader)
        self._undisposed: list[CompletedCheckpoint] = []
        for pointer in access.completed():
            self._retained.append(CompletedCheckpoint(pointer, _retained_metadata(access, pointer)))
        for checkpoint in self._retained:
            self.registry.register(checkpoint.checkpoint_id, self._shared(checkpoint.metadata))
        #: the job's own checkpoints restored from in no-claim mode: never disposed, nor their shared files
        self._kept = self._recorded_kept()
        if restored_from is not None and restore_mode is RestoreMode.NO_CLAIM and any(
                c.metadata == restored_from.metadata for c in self._retained):
            self._kept.add(restored_from.checkpoint_id)
        for checkpoint in self._retained:
            if checkpoint.checkpoint_id in self._kept:
                self.registry.protected.update(_key(h) for h in self._shared(checkpoint.metadata))
        if restored_from is not None:
            if restore_mode is RestoreMode.CLAIM:
                self.registry.register(restored_from.checkpoint_id, self._shared(restored_from.metadata))
            else:
                self.registry.protected.update(_key(h) for h in self._shared(restored_from.metadata))

    def _recorded_kept(self) -> set[int]:
        """The kept ids the retained checkpoints record, of checkpoints still retained."""
        retained = {c.checkpoint_id for c in self._retained}
        recorded = (c.metadata.properties.get(NO_CLAIM_KEPT) for c in self._retained)
        return {i for ids in recorded if isinstance(ids, list) for i in ids if i in retained}

    # --- queries
    def completed(self) -> list[CompletedCheckpoint]:
        return list(self._retained)

    def latest(self) -> CompletedCheckpoint | None:
        return self._retained[-1] if self._retained else None

    def attempt(self, epoch: int) -> CompletedCheckpoint | None:
        """The completed checkpoint of ``epoch``, if there is one (which a replay of it replaces)."""
        return next((c for c in self._retained if c.checkpoint_id == epoch), None)

    def latest_before(self, checkpoint_id: int) -> CompletedCheckpoint | None:
        """The restore point of epoch ``checkpoint_id`` (exactly-once rule): the latest checkpoint
        before it, and for a replayed epoch only if its completed attempt restored that one
        (``RESTORE_POINT``), else None, as when retention removed it. After a restart, the
        checkpoints found on disk can include older ones the job no longer retains (restored from
        in no-claim mode, or whose deletion failed): restoring one of those would drop the epochs
        between it and the replayed one."""
        earlier = [c for c in self._retained if c.checkpoint_id < checkpoint_id]
        latest = earlier[-1] if earlier else None
        attempt = self.attempt(checkpoint_id)
        if latest is None or attempt is None or RESTORE_POINT not in attempt.metadata.properties:
            return latest  # not a replay, or a checkpoint written before the property
        return latest if attempt.metadata.properties[RESTORE_POINT] == latest.checkpoint_id else None

    def lost_commit(self) -> int | None:
        """The id of a checkpoint this job committed (its owner record keeps the latest) that is
        newer than every completed checkpoint found now: its ``_metadata`` was deleted or lost, and
        continuing from the latest found would silently drop its epochs. None when none is missing."""
        if self.ownership is None:
            return None
        committed = self.ownership.last_commit()
        latest = self.latest()
        return committed if committed is not None and committed > (latest.checkpoint_id if latest else 0) else None

    def lost_commit_message(self, committed: int, how_to_continue: str) -> str:
        latest = self.latest()
        found = (f"its latest completed checkpoint is {latest.checkpoint_id} ({latest.pointer.external_pointer})"
                 if latest is not None else "it has no completed checkpoint")
        return (f"refusing to roll back job {self.ownership.job_id!r}: its owner record says checkpoint "  # type: ignore[union-attr]
                f"{committed} was committed, but {found}; checkpoint {committed}'s _metadata was deleted or lost. "
                f"Running on would silently drop the epochs after the latest one found. To recover: put back the "
                f"missing _metadata if it was removed by mistake; or continue deliberately from older state "
                f"({how_to_continue}), knowing that the updates of the epochs after it are lost")

    def check_fresh_start(self, epoch: int) -> None:
        """Raise ``RestoreError`` unless epoch ``epoch`` may start from empty state (no restore
        point): an epoch that replaces no completed checkpoint may, or one whose first replaced
        checkpoint started from empty state too (``FRESH_START``; for checkpoints written before
        that property, epoch 1). A replay of a later epoch whose restore point retention removed,
        or of an epoch that restored a snapshot, would otherwise restore nothing and replace the
        completed checkpoints from ``epoch`` on, losing their state."""
        replaced = [c for c in self._retained if c.checkpoint_id >= epoch]
        if not replaced:
            return
        fresh = replaced[0].metadata.properties.get(FRESH_START)
        if fresh or (fresh is None and epoch <= 1):  # None: a checkpoint written before the property
            return
        raise RestoreError(
            f"epoch {epoch} cannot be replayed: the state its first attempt restored is not a checkpoint the job "
            f"retains (retention deleted it, or it was a snapshot given explicitly; the job retains checkpoints "
            f"{[c.checkpoint_id for c in self._retained]}, num-retained {self.num_retained}), so it would replace "
            f"checkpoints {[c.checkpoint_id for c in replaced]} with state that misses epochs. "
            f"Run the next epoch ({self._retained[-1].checkpoint_id + 1}) instead, or restore the state before "
            f"epoch {epoch} explicitly from a snapshot (spark.statekit.restore.path, LocalRunner.restore_from)")

    # --- changes
    def add(self, metadata: CheckpointMetadata) -> CompletedCheckpoint:
        """Commit ``metadata``; a replayed epoch first discards the checkpoints it supersedes."""
        if self.ownership is not None:
            self.ownership.check()  # a fenced run commits and discards nothing
            metadata = self.ownership.stamp(metadata)
        # registered first, so disposing superseded checkpoints never deletes a file this one uses
        self.registry.register(metadata.checkpoint_id, self._shared(metadata))
        new_files = frozenset(h.stored_as for h in stream_handles(metadata) if h.stored_as)
        for stale in [c for c in self._retained if c.checkpoint_id >= metadata.checkpoint_id]:
            log.warning("checkpoint %d of a replayed epoch supersedes completed checkpoint %d",
                        metadata.checkpoint_id, stale.checkpoint_id)
            self._kept.discard(stale.checkpoint_id)  # a replayed epoch rewrites it in place
            self._dispose(stale, keep=new_files, sweep=False)
        if self._kept:
            metadata = replace(metadata, properties={**metadata.properties, NO_CLAIM_KEPT: sorted(self._kept)})
        pointer = self.access.commit(metadata.checkpoint_id, metadata.to_bytes())
        completed = CompletedCheckpoint(pointer, metadata)
        self._retained.append(completed)
        if self.ownership is not None:
            try:
                self.ownership.record_commit(metadata.checkpoint_id)
            except StatekitError as exc:  # committed: a record left behind only guards less
                log.warning("checkpoint %d is complete, but recording it in the owner record failed: %s",
                            metadata.checkpoint_id, exc)
        # chk-<id> is the new checkpoint's now: an earlier one of the same id must not be deleted again
        self._undisposed = [c for c in self._undisposed if c.checkpoint_id != metadata.checkpoint_id]
        for leftover in list(self._undisposed):
            try:
                self.access.dispose(leftover.pointer, frozenset())
                self._undisposed.remove(leftover)
            except StatekitError as exc:
                log.warning("deleting checkpoint %d failed again: %s", leftover.checkpoint_id, exc)
        while len(self._retained) > self.num_retained:
            oldest = self._retained[0]
            try:
                self._dispose(oldest)
            except StatekitError as exc:  # the new checkpoint is committed: old files only cost space
                log.warning("checkpoint %d is complete, but deleting checkpoint %d failed: %s",
                            metadata.checkpoint_id, oldest.checkpoint_id, exc)
        return completed

    def abort(self, checkpoint_id: int, acknowledged: Iterable[SubtaskState] = ()) -> None:
        """Remove what a failed checkpoint wrote: its directory and its unregistered shared files.
        Called while an error propagates, so a failure here is logged, never raised over it; a
        fenced run removes nothing (the directory may hold the new owner's files of the same epoch)."""
        try:
            if self.ownership is not None and not self.ownership.holds():
                log.warning("checkpoint %d was not cleaned up: this run no longer owns job %r", checkpoint_id,
                            self.ownership.job_id)
                return
            self.access.abort(checkpoint_id)
            for handle in subtask_stream_handles(acknowledged):
                if self.access.is_shared(handle) and _key(handle) not in self.registry.last_used \
                        and _key(handle) not in self.registry.protected:
                    self.access.discard_shared(handle)
        except StatekitError as exc:
            log.warning("cleaning up the failed checkpoint %d failed: %s", checkpoint_id, exc)

    def _dispose(self, checkpoint: CompletedCheckpoint, keep: frozenset[str] = frozenset(),
                 sweep: bool = True) -> None:
        """Drop a checkpoint; ``keep`` and ``sweep=False`` serve a superseded attempt of a replayed
        epoch, whose replacement has the same id and may share its directory and shared files."""
        self._retained.remove(checkpoint)
        if checkpoint.checkpoint_id in self._kept:
            log.info("keeping checkpoint %d: it was restored from in no-claim mode", checkpoint.checkpoint_id)
        else:
            try:
                self.access.dispose(checkpoint.pointer, keep)
            except StatekitError:
                if sweep:  # retention's (a superseded attempt shares its directory with its replacement)
                    self._undisposed.append(checkpoint)
                raise
        if not sweep:
            return
        if self._retained:
            lowest = self._retained[0].checkpoint_id
        else:
            # nothing retained: only files registered by later checkpoints would survive
            lowest = checkpoint.checkpoint_id + 1
        held = frozenset(_key(h) for c in self._undisposed for h in self._shared(c.metadata))
        for handle in self.registry.unused_before(lowest, held):
            self.access.discard_shared(handle)

    def _shared(self, metadata: CheckpointMetadata) -> list[StreamStateHandle]:
        return [h for h in stream_handles(metadata) if self.access.is_shared(h)]
