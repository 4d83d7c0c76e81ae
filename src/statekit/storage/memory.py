"""The ``jobmanager`` storage: snapshot bytes travel inline in handles and stay in driver memory.

As in Flink, it is meant for tests and small state: nothing survives the driver process, and
each subtask's snapshot is bounded by ``max_state_size`` (default 5 MiB).
"""
from __future__ import annotations

from typing import Any

from statekit.spi.errors import RestoreError, SnapshotError
from statekit.spi.handles import StreamStateHandle
from statekit.spi.names import check_job_id
from statekit.spi.options import Option, OptionSet, size
from statekit.spi.storage import (
    CheckpointOutputStream, CheckpointStorage, CheckpointStorageAccess, CheckpointStreams,
    CompletedCheckpointPointer, ResolvedCheckpoint, StateScope,
)
from statekit.storage.pointers import SavepointLocation, resolve
from statekit.storage.inline import InlineOutputStream, InlineStreams

DEFAULT_MAX_STATE_SIZE = 5 * 1024 * 1024
POINTER_SCHEME = "jobmanager"
OPTIONS = OptionSet("spark.statekit.checkpoint.jobmanager.",
                    Option("max-state-size", size(), DEFAULT_MAX_STATE_SIZE,
                           "the largest snapshot of one subtask kept in driver memory"))
MAX_STATE_SIZE_SETTING = OPTIONS.setting("max-state-size")


class SizeLimitedInlineStreams(InlineStreams):
    """Inline streams of one subtask's snapshot, failing once their total exceeds the limit."""

    def __init__(self, subtask: str, max_state_size: int) -> None:
        self._subtask = subtask
        self._max = max_state_size
        self._total = 0

    def create_output(self, scope: StateScope = StateScope.EXCLUSIVE,
                      name: str | None = None) -> CheckpointOutputStream:
        return InlineOutputStream(on_close=self._account)

    def _account(self, handle: StreamStateHandle) -> None:
        self._total += handle.size
        if self._total > self._max:
            raise SnapshotError(
                f"the snapshot of {self._subtask} is {self._total} bytes, over the jobmanager storage's "
                f"limit of {self._max} bytes per subtask ({MAX_STATE_SIZE_SETTING}); raise the limit or "
                f"use the filesystem storage (spark.statekit.checkpoint.storage=filesystem)")


class JobManagerStorageAccess(CheckpointStorageAccess):
    def __init__(self, job_id: str, max_state_size: int) -> None:
        self.job_id = job_id
        self.max_state_size = max_state_size
        self._completed: dict[int, bytes] = {}
        self._owner: bytes | None = None

    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return SizeLimitedInlineStreams(subtask, self.max_state_size)

    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        previous = self._completed.get(checkpoint_id)
        if previous is not None and previous != metadata:
            raise SnapshotError(f"checkpoint {checkpoint_id} of job {self.job_id} is already complete "
                                f"with different content; it is never overwritten")
        self._completed[checkpoint_id] = metadata
        return self._pointer(checkpoint_id)

    def abort(self, checkpoint_id: int) -> None:
        pass  # nothing was stored before commit

    def latest_completed(self) -> CompletedCheckpointPointer | None:
        return self._pointer(max(self._completed)) if self._completed else None

    def completed(self) -> list[CompletedCheckpointPointer]:
        return [self._pointer(i) for i in sorted(self._completed)]

    def read_metadata(self, pointer: CompletedCheckpointPointer) -> bytes:
        try:
            return self._completed[pointer.checkpoint_id]
        except KeyError:
            raise RestoreError(f"checkpoint {pointer.checkpoint_id} of job {self.job_id} is not in driver "
                               f"memory (jobmanager storage keeps only retained checkpoints of this "
                               f"driver process)") from None

    def dispose(self, pointer: CompletedCheckpointPointer, keep: frozenset[str] = frozenset()) -> None:
        self._completed.pop(pointer.checkpoint_id, None)

    def restore_streams(self) -> CheckpointStreams:
        return InlineStreams()

    def read_owner(self) -> bytes | None:
        return self._owner

    def write_owner(self, record: bytes) -> None:
        self._owner = bytes(record)

    def _pointer(self, checkpoint_id: int) -> CompletedCheckpointPointer:
        return CompletedCheckpointPointer(checkpoint_id, f"{POINTER_SCHEME}://{self.job_id}/chk-{checkpoint_id}",
                                          job_id=self.job_id)


class JobManagerCheckpointStorage(CheckpointStorage):
    """Options: ``max-state-size`` (``OPTIONS``)."""

    name = "jobmanager"
    durable = False
    writes_files = False
    shared_files = False

    def __init__(self, **options: Any) -> None:
        self.max_state_size: int = OPTIONS.parse(options)["max-state-size"]

    def create_access(self, job_id: str) -> JobManagerStorageAccess:
        return JobManagerStorageAccess(check_job_id(job_id), self.max_state_size)

    def resolve_checkpoint(self, external_pointer: str,
                           setting: str = "spark.statekit.restore.path") -> ResolvedCheckpoint:
        """Savepoints and checkpoints on a file system (as in Flink, where the JobManager storage
        resolves file pointers too); its own checkpoints live only in this driver's memory."""
        if external_pointer.startswith(f"{POINTER_SCHEME}://"):
            raise RestoreError(f"{setting}={external_pointer!r} is a checkpoint kept in driver memory (jobmanager "
                               f"storage): it cannot be restored by pointer; take a savepoint "
                               f"(spark.statekit.savepoint.dir) and restore from that")
        return resolve(external_pointer, setting=setting)

    def savepoint_location(self, savepoint_dir: str, savepoint_id: str) -> SavepointLocation:
        return SavepointLocation(savepoint_dir, savepoint_id)

    def __repr__(self) -> str:
        return f"JobManagerCheckpointStorage(max_state_size={self.max_state_size})"
