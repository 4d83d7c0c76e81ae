"""Checkpoint storage contracts: where snapshot bytes go and how they come back.

``CheckpointStorage`` is the picklable factory chosen by configuration (``jobmanager``,
``filesystem``, a plugin). A task writes through ``CheckpointStreams`` (one per checkpoint and
subtask); the coordinator uses ``CheckpointStorageAccess`` to commit, resolve and retain.
"""
from __future__ import annotations

import enum
import io
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, BinaryIO, ClassVar, Mapping

from statekit.spi.handles import StreamStateHandle


#: bytes per read when a local file is uploaded (``CheckpointStreams.upload_file``)
UPLOAD_CHUNK = 4 << 20


class StateScope(str, enum.Enum):
    EXCLUSIVE = "exclusive"  # belongs to one checkpoint; deleted with it
    SHARED = "shared"  # may be referenced by later checkpoints (incremental snapshots)


class CheckpointOutputStream(io.RawIOBase, ABC):
    """A write-once stream that becomes a ``StreamStateHandle`` (size and checksum recorded)."""

    def writable(self) -> bool:
        return True

    @abstractmethod
    def tell(self) -> int:
        """Bytes written so far (the offset of the next write)."""

    @abstractmethod
    def close_and_get_handle(self) -> StreamStateHandle: ...

    @abstractmethod
    def discard(self) -> None:
        """Abandon the stream and remove anything it wrote."""


class CheckpointStreams(ABC):
    """Writing and reading snapshot bytes for one checkpoint of one subtask."""

    @abstractmethod
    def create_output(self, scope: StateScope = StateScope.EXCLUSIVE,
                      name: str | None = None) -> CheckpointOutputStream: ...

    @abstractmethod
    def read(self, handle: StreamStateHandle) -> bytes:
        """All bytes of a stream, verified against the handle's checksum."""

    @abstractmethod
    def read_range(self, handle: StreamStateHandle, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``; a short read raises ``CorruptStateError``. The
        caller verifies the checksums of the ``ByteRange``s inside (``verify_checksum``)."""

    def copy_to(self, handle: StreamStateHandle, target: BinaryIO) -> None:
        """Write the stream's bytes to ``target``, verified like ``read`` (size and checksum; the
        caller discards ``target`` when it raises). Restores of whole files (RocksDB's SSTs) use
        it; the default reads the stream whole, a storage of large files copies in chunks."""
        target.write(self.read(handle))

    def upload_file(self, path: str, scope: StateScope, name: str, move: bool = False) -> StreamStateHandle:
        """A new stream holding the bytes of the local file ``path`` (RocksDB's SST files, LMDB's
        environment copy). The default copies it in chunks through ``create_output``; a storage on
        this machine's file system may copy it in the kernel, or with ``move`` (the file was written
        for this stream and is the caller's to give away) rename it into place. A moved file may be
        a hard link to a live file (RocksDB's SST files): rename, copy or unlink it, never write to it."""
        out = self.create_output(scope, name=name)
        try:
            with open(path, "rb") as f:
                while chunk := f.read(UPLOAD_CHUNK):
                    out.write(chunk)
            return out.close_and_get_handle()
        except BaseException:
            out.discard()
            raise

    def link_to(self, handle: StreamStateHandle, path: str) -> bool:
        """Make ``path`` (a new local file) a hard link to the stream's stored file, verified like
        ``copy_to``, and return True; or do nothing and return False where the stream is no file
        on this machine's file system (or that file system refuses the link), and the caller
        copies. For files nobody writes to afterwards (RocksDB's SST files): the link shares the
        stored bytes. The default declines."""
        return False


@dataclass(frozen=True)
class CompletedCheckpointPointer:
    """Where a completed checkpoint or savepoint lives (external form: a URL or id).
    ``checkpoint_id`` is the id its place gives it (``chk-<n>``; -1 for a savepoint), and
    ``job_id`` the job whose checkpoints hold it, when the storage knows (None: a savepoint, or a
    storage that does not say): the metadata read there must name the same (``read_metadata``)."""

    checkpoint_id: int
    external_pointer: str
    is_savepoint: bool = False
    job_id: str | None = None


class CheckpointStorageAccess(ABC):
    """The coordinator's view of one job's checkpoints."""

    @abstractmethod
    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        """Streams for one subtask's part of checkpoint ``checkpoint_id``."""

    @abstractmethod
    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        """Make the checkpoint complete by writing its metadata last and atomically."""

    @abstractmethod
    def abort(self, checkpoint_id: int) -> None:
        """Remove everything an incomplete checkpoint wrote, the streams it wrote in shared scope
        included: the coordinator may not know their handles (a failed Spark stage drops the
        acknowledgements of the subtasks that finished), and no completed checkpoint references
        them (a backend reuses only streams of completed checkpoints)."""

    @abstractmethod
    def latest_completed(self) -> CompletedCheckpointPointer | None: ...

    @abstractmethod
    def completed(self) -> list[CompletedCheckpointPointer]:
        """Every retained completed checkpoint, oldest first."""

    @abstractmethod
    def restore_streams(self) -> CheckpointStreams:
        """Streams that read the handles of this job's completed checkpoints."""

    def is_shared(self, handle: StreamStateHandle) -> bool:
        """True for a stream in shared scope (it may outlive the checkpoint that wrote it)."""
        return False

    def discard_shared(self, handle: StreamStateHandle) -> None:
        """Delete a shared stream no retained checkpoint references any more."""

    @abstractmethod
    def read_metadata(self, pointer: CompletedCheckpointPointer) -> bytes: ...

    @abstractmethod
    def dispose(self, pointer: CompletedCheckpointPointer, keep: frozenset[str] = frozenset()) -> None:
        """Delete a completed checkpoint's metadata and exclusive files (retention), except the
        files whose paths are in ``keep`` (a replayed epoch's new attempt writes beside the old)."""

    @abstractmethod
    def read_owner(self) -> bytes | None:
        """The job's owner record (``write_owner``), or None when none was written."""

    @abstractmethod
    def write_owner(self, record: bytes) -> None:
        """Replace the job's owner record, atomically: readers see the old or the new record whole.
        A run writes it when it starts and reads it back before every commit (job fencing)."""


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """A completed checkpoint or savepoint found by its external pointer: its metadata bytes and
    the streams that read its handles."""

    pointer: CompletedCheckpointPointer
    metadata: bytes
    streams: CheckpointStreams


class SavepointTarget(ABC):
    """Where one savepoint is written: streams for its (self-contained) files, then its metadata."""

    streams: CheckpointStreams

    @abstractmethod
    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        """Write the savepoint's metadata last and atomically; the pointer's ``external_pointer``
        is what ``resolve_checkpoint`` (and ``spark.statekit.restore.path``) takes."""

    def discard(self) -> None:
        """Remove what was written for this savepoint; called when it fails before ``commit``
        completed, so that no half-written savepoint stays behind. The default removes nothing."""


class CheckpointStorage(ABC):
    """Picklable storage configuration; creates per-job access objects.

    The constructor takes the options ``spark.statekit.checkpoint.<name>.*`` as keyword arguments
    (strings from Spark conf), and first the directory ``spark.statekit.checkpoint.dir`` when the
    storage declares ``takes_directory``.

    The class declares what it is (the conformance suite reads these, as fsspec's test knobs):
    ``durable``, ``takes_directory``, ``writes_files``, ``shared_files``, and ``test_support``."""

    name: ClassVar[str]
    #: completed checkpoints survive the driver process (False: they live in its memory)
    durable: ClassVar[bool] = True
    #: the constructor's first argument is ``spark.statekit.checkpoint.dir``
    takes_directory: ClassVar[bool] = False
    #: a stream larger than the storage's memory threshold becomes a file of its own (True), every
    #: byte stays inline in the metadata (False), or the storage decides per stream (None)
    writes_files: ClassVar[bool | None] = None
    #: streams written with ``StateScope.SHARED`` are files that ``is_shared`` recognizes and that
    #: outlive their checkpoint (True), there are none (False), or it depends (None)
    shared_files: ClassVar[bool | None] = None
    #: ``"module:Class"`` of the ``statekit.conformance_tests.StorageTestSupport`` that gives the
    #: conformance suite a fresh location per test and lets it damage stored bytes; None: the
    #: default support (a fresh ``spark.statekit.checkpoint.dir`` when ``takes_directory``)
    test_support: ClassVar[str | None] = None

    @classmethod
    def from_settings(cls, directory: str | None, options: Mapping[str, Any]) -> "CheckpointStorage":
        """The storage as settings build it: ``directory`` (``spark.statekit.checkpoint.dir``) as
        the first argument when the storage ``takes_directory``, its own options as keywords."""
        return cls(directory, **options) if cls.takes_directory else cls(**options)  # type: ignore[call-arg]

    @abstractmethod
    def create_access(self, job_id: str) -> CheckpointStorageAccess:
        """The access to job ``job_id``'s checkpoints; rejects an invalid job id
        (``statekit.spi.names.check_job_id``) before anything is written."""

    @abstractmethod
    def resolve_checkpoint(self, external_pointer: str,
                           setting: str = "spark.statekit.restore.path") -> ResolvedCheckpoint:
        """The completed checkpoint or savepoint at ``external_pointer`` (a pointer's
        ``external_pointer``, a savepoint URL, or a URL the user gave in ``setting``), with streams
        that read its handles wherever it was moved (Flink's ``resolveCheckpoint``). Savepoints
        are files: every storage resolves file-system URLs (``statekit.storage.pointers.resolve``).
        A pointer that is no completed snapshot is a ``RestoreError`` naming it and ``setting``."""

    @abstractmethod
    def savepoint_location(self, savepoint_dir: str, savepoint_id: str) -> SavepointTarget:
        """Where savepoint ``savepoint_id`` is written under ``savepoint_dir``
        (``spark.statekit.savepoint.dir``); a savepoint is self-contained and movable."""
