"""Which snapshot an epoch restores, and the guard against silent rollback.

Epoch N restores the job's latest completed checkpoint with an id below N (a bounded run: the
latest); a replayed epoch only the one its first attempt restored (``CheckpointStore.latest_before``).
A streaming epoch also knows what Spark committed: micro-batch ``b`` is epoch ``b + 1``,
so when Spark's commit log says micro-batch ``C`` was committed, the state must continue from
checkpoint ``C + 1`` or a later one. An older restore point (its ``_metadata`` was deleted, or
the ``jobmanager`` storage lost everything with the driver) would silently drop committed
updates, so the epoch fails instead, unless ``spark.statekit.restore.path`` names the snapshot to
continue from deliberately. ``spark.statekit.restore.path`` is also what a job without a
checkpoint of its own starts from; a replayed first epoch restores what its first attempt did.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from statekit.checkpoint.metadata import read_metadata
from statekit.checkpoint.ownership import RunIdentity, recorded_identity
from statekit.checkpoint.store import CheckpointStore, CompletedCheckpoint
from statekit.runtime.task import PROCESSING_TIME, wall_clock_ms
from statekit.spark.conf import StatekitConf
from statekit.spi.errors import JobOwnershipError, RestoreError

log = logging.getLogger(__name__)
#: the checkpoint property naming the external snapshot an epoch restored from
RESTORED_FROM = "restored_from"


@dataclass(frozen=True)
class StreamProgress:
    """What the query's Spark checkpoint says when a micro-batch starts."""

    identity: RunIdentity
    location: str  # the query's checkpointLocation
    last_committed_batch: int | None
    #: Spark's timestamp of this micro-batch (its offset log entry): the same when it is replayed
    batch_timestamp_ms: int | None = None

    @property
    def committed_epoch(self) -> int:
        """The epoch of the last micro-batch Spark committed (0: none)."""
        return 0 if self.last_committed_batch is None else self.last_committed_batch + 1


@dataclass(frozen=True)
class RestorePoint:
    epoch: int
    checkpoint: CompletedCheckpoint | None  # None: fresh state
    external_url: str | None  # where ``checkpoint`` is when it is not one of the job's own
    store: CheckpointStore


def choose_restore_point(store: CheckpointStore, conf: StatekitConf, job_id: str, epoch: int | None,
           progress: StreamProgress | None, durable: bool = True) -> RestorePoint:
    """The restore point of ``epoch`` (None: the epoch after the latest checkpoint) and the store
    to commit it to (one that knows an external restore point, for no-claim retention);
    ``durable``: whether the storage's checkpoints survive the driver."""
    own = store.latest() if epoch is None else store.latest_before(epoch)
    if epoch is not None and progress is not None:
        _refuse_replacing_another_owner(store, epoch, progress, job_id)
    committed = progress.committed_epoch if progress is not None else 0
    rolled_back = committed > (own.checkpoint_id if own is not None else 0)
    external = conf.restore_path if own is None or rolled_back else None
    if rolled_back and external is None:
        raise RestoreError(_rollback_message(store, conf, job_id, own, progress, durable))  # type: ignore[arg-type]
    lost = store.lost_commit()
    if lost is not None:
        latest = store.latest()
        external = conf.restore_path
        if external is None:
            raise RestoreError(store.lost_commit_message(lost, "spark.statekit.restore.path=" + (
                latest.pointer.external_pointer if latest is not None else "<a savepoint or checkpoint>")))
        log.warning("job %r continues from %s (spark.statekit.restore.path), although checkpoint %d was committed",
                    job_id, external, lost)
    if own is None and epoch is not None and not rolled_back:  # a replay restores what its first attempt did
        external = _first_attempts_restore(store, epoch) or external
    if external is None:
        if own is None and epoch is not None:
            store.check_fresh_start(epoch)
        return RestorePoint(epoch if epoch is not None else (own.checkpoint_id + 1 if own else 1), own, None, store)
    if rolled_back:
        log.warning("job %r continues from %s (spark.statekit.restore.path), although Spark committed micro-batches "
                    "up to %d", job_id, external, committed - 1)
    resolved = conf.create_storage().resolve_checkpoint(external)
    restored = CompletedCheckpoint(resolved.pointer, read_metadata(resolved.metadata, resolved.pointer))
    store = CheckpointStore(store.access, store.num_retained, restored, conf.restore_mode, store.ownership)
    # the snapshot found, not the URL given: a job directory's latest checkpoint moves on
    return RestorePoint(epoch if epoch is not None else restored.checkpoint_id + 1, restored,
                        resolved.pointer.external_pointer, store)


def _first_attempts_restore(store: CheckpointStore, epoch: int) -> str | None:
    """The external snapshot a completed earlier attempt of ``epoch`` restored from, if any: a
    replay restores the same even when ``spark.statekit.restore.path`` was unset or changed since,
    or names a job directory whose latest checkpoint is another one now."""
    attempt = store.attempt(epoch)
    return attempt.metadata.properties.get(RESTORED_FROM) if attempt else None


def _refuse_replacing_another_owner(store: CheckpointStore, epoch: int, progress: StreamProgress,
                                    job_id: str) -> None:
    """A query's epochs follow its micro-batch ids: a query that took a job over must not replace
    the newer checkpoints another query or job wrote there."""
    owners = [recorded_identity(c) for c in store.completed() if c.checkpoint_id >= epoch]
    foreign = [owner for owner in owners if owner is not None and not owner.same_as(progress.identity)]
    latest = store.latest()
    if foreign and latest is not None:
        raise JobOwnershipError(
            f"{progress.identity.description} runs micro-batch {epoch - 1} (epoch {epoch}), but job {job_id!r} has "
            f"checkpoints up to {latest.checkpoint_id} written by {foreign[-1].description}; this epoch would "
            f"replace them. Give the query its own job id, with spark.statekit.restore.path="
            f"{latest.pointer.external_pointer} to start from that state")


def _rollback_message(store: CheckpointStore, conf: StatekitConf, job_id: str, own: CompletedCheckpoint | None,
                      progress: StreamProgress, durable: bool) -> str:
    committed_batch = progress.committed_epoch - 1
    where = (f"{conf.checkpoint_dir.rstrip('/')}/{job_id}" if conf.checkpoint_dir
             else f"the {conf.storage} storage")
    ids = [c.checkpoint_id for c in store.completed()]
    found = f"its completed checkpoints are {ids}" if ids else "it has no completed checkpoint"
    lost = (f" The {conf.storage} storage keeps checkpoints in driver memory: a driver restart loses all of them."
            if not durable else "")
    restore_from = (f" (e.g. {own.pointer.external_pointer}, the latest it has)" if own is not None else
                    " (a savepoint or a checkpoint)")
    return (f"refusing to roll back job {job_id!r}: Spark's checkpoint {progress.location} says micro-batch "
            f"{committed_batch} was committed (commits/{committed_batch}), so the state must continue from statekit "
            f"checkpoint {progress.committed_epoch} or later, but in {where} {found}.{lost} Running on would silently "
            f"drop committed updates. To recover: put back the missing checkpoint if it was removed by mistake; or "
            f"continue deliberately from older state by setting spark.statekit.restore.path{restore_from}, knowing "
            f"that the updates of the micro-batches after it are lost; or start the query with a new "
            f"checkpointLocation and a new job id, so that Spark reprocesses its source")


def epoch_processing_time(store: CheckpointStore, epoch: int, progress: StreamProgress | None) -> int:
    """The processing time of ``epoch`` (epoch ms), the same whenever the epoch is run again: Spark's
    timestamp of the micro-batch; otherwise the time a completed earlier attempt recorded; otherwise now."""
    if progress is not None and progress.batch_timestamp_ms is not None:
        return progress.batch_timestamp_ms
    for attempt in store.completed():
        recorded = attempt.metadata.properties.get(PROCESSING_TIME)
        if attempt.checkpoint_id == epoch and isinstance(recorded, int):
            return recorded
    return wall_clock_ms()
