"""The ``filesystem`` storage: checkpoints on any fsspec URL (file://, s3://, memory://, ...).

Layout: ``statekit.storage.layout`` (Flink's).

Handles record paths relative to the job directory (checkpoints) or the savepoint directory
(savepoints), so a savepoint can be moved. Streams smaller than ``memory_threshold`` bytes are
kept inline in the metadata instead of becoming files (Flink's ``fs.memory-threshold``).

Every failed file-system operation is a statekit error naming the path and the setting the
location came from (``spark.statekit.checkpoint.dir`` or ``spark.statekit.savepoint.dir``).
"""
from __future__ import annotations

import posixpath
from typing import Any

import fsspec

from statekit.spi.errors import RestoreError, SnapshotError
from statekit.spi.handles import FileStateHandle, StreamStateHandle
from statekit.spi.names import check_job_id
from statekit.spi.options import Option, OptionSet, size
from statekit.spi.storage import (
    CheckpointStorage, CheckpointStorageAccess, CheckpointStreams, CompletedCheckpointPointer, ResolvedCheckpoint,
)
from statekit.storage.files import (
    DEFAULT_MEMORY_THRESHOLD, FileSystemCheckpointStreams, check_writable, completed_checkpoint_ids,
    replace_atomically, write_metadata_atomically,
)
from statekit.storage.layout import METADATA_FILE, OWNER_FILE, SHARED_DIR, shared_file_tag
from statekit.storage.pointers import SavepointLocation, resolve
from statekit.storage.urls import CHECKPOINT_DIR_SETTING, io_failure, open_url, storage_errors

OPTIONS = OptionSet("spark.statekit.checkpoint.filesystem.",
                    Option("memory-threshold", size(minimum=0, maximum=1 << 30), DEFAULT_MEMORY_THRESHOLD,
                           "streams up to this size stay inline in _metadata instead of becoming files"))


class FileSystemStorageAccess(CheckpointStorageAccess):
    def __init__(self, fs: fsspec.AbstractFileSystem, checkpoint_root: str, job_id: str, memory_threshold: int) -> None:
        self.fs = fs
        self.job_root = posixpath.join(checkpoint_root, job_id)
        self.job_id = job_id
        self.memory_threshold = memory_threshold

    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return FileSystemCheckpointStreams(self.fs, self.job_root, f"chk-{checkpoint_id}", self.memory_threshold)

    def restore_streams(self) -> CheckpointStreams:
        return FileSystemCheckpointStreams(self.fs, self.job_root, None, self.memory_threshold)

    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        write_metadata_atomically(self.fs, self._metadata_path(checkpoint_id), metadata)
        return self._pointer(checkpoint_id)

    def abort(self, checkpoint_id: int) -> None:
        directory = posixpath.join(self.job_root, f"chk-{checkpoint_id}")
        try:
            if self.fs.exists(self._metadata_path(checkpoint_id)):
                raise SnapshotError(f"checkpoint {checkpoint_id} is complete and cannot be aborted")
            self._rm_tree(directory)
            self._remove_shared_files_of(checkpoint_id)
        except storage_errors() as exc:
            raise SnapshotError(io_failure("remove the aborted checkpoint", directory, exc,
                                           CHECKPOINT_DIR_SETTING)) from exc

    def _remove_shared_files_of(self, checkpoint_id: int) -> None:
        """The shared files written for an aborted checkpoint, found by their names: no completed
        checkpoint references them (a backend reuses only files of completed checkpoints), and the
        coordinator may not know their handles (subtasks that finished in a stage that failed)."""
        tag = shared_file_tag(checkpoint_id)
        try:
            # refresh: executors wrote the files, so a listing cached by this process is stale
            paths = self.fs.ls(posixpath.join(self.job_root, SHARED_DIR), detail=False, refresh=True)
        except FileNotFoundError:
            return
        for path in paths:
            if posixpath.basename(path.rstrip("/")).startswith(tag):
                self._rm_file(path)

    def completed(self) -> list[CompletedCheckpointPointer]:
        try:
            return [self._pointer(i) for i in completed_checkpoint_ids(self.fs, self.job_root)]
        except FileNotFoundError:
            return []
        except storage_errors() as exc:
            raise RestoreError(io_failure("list the checkpoints in", self.job_root, exc, CHECKPOINT_DIR_SETTING)) \
                from exc

    def latest_completed(self) -> CompletedCheckpointPointer | None:
        completed = self.completed()
        return completed[-1] if completed else None

    def read_metadata(self, pointer: CompletedCheckpointPointer) -> bytes:
        path = self._metadata_path(pointer.checkpoint_id)
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            raise RestoreError(f"{path} does not exist: checkpoint {pointer.checkpoint_id} is not complete") from None
        except storage_errors() as exc:
            raise RestoreError(io_failure("read checkpoint metadata", path, exc, CHECKPOINT_DIR_SETTING)) from exc

    def read_owner(self) -> bytes | None:
        path = posixpath.join(self.job_root, OWNER_FILE)
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        except storage_errors() as exc:
            raise RestoreError(io_failure("read the job's owner record", path, exc, CHECKPOINT_DIR_SETTING)) from exc

    def write_owner(self, record: bytes) -> None:
        replace_atomically(self.fs, posixpath.join(self.job_root, OWNER_FILE), record, CHECKPOINT_DIR_SETTING)

    def dispose(self, pointer: CompletedCheckpointPointer, keep: frozenset[str] = frozenset()) -> None:
        directory = posixpath.join(self.job_root, f"chk-{pointer.checkpoint_id}")
        try:
            # _metadata goes first: a half-deleted checkpoint must never look complete
            self._rm_file(self._metadata_path(pointer.checkpoint_id))
            if not keep:
                self._rm_tree(directory)
                return
            try:
                files = self.fs.find(directory)
            except FileNotFoundError:
                return
            for path in files:
                if posixpath.relpath(path, self.job_root) not in keep:
                    self._rm_file(path)
        except storage_errors() as exc:
            raise SnapshotError(io_failure("delete checkpoint", directory, exc, CHECKPOINT_DIR_SETTING)) from exc

    def is_shared(self, handle: StreamStateHandle) -> bool:
        return isinstance(handle, FileStateHandle) and handle.path.startswith(SHARED_DIR + "/")

    def discard_shared(self, handle: StreamStateHandle) -> None:
        if self.is_shared(handle):
            path = posixpath.join(self.job_root, handle.path)  # type: ignore[attr-defined]
            try:
                self._rm_file(path)
            except storage_errors() as exc:
                raise SnapshotError(io_failure("delete shared file", path, exc, CHECKPOINT_DIR_SETTING)) from exc

    def _rm_file(self, path: str) -> None:
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass

    def _rm_tree(self, directory: str) -> None:
        try:
            self.fs.rm(directory, recursive=True)
        except FileNotFoundError:
            pass

    def _metadata_path(self, checkpoint_id: int) -> str:
        return posixpath.join(self.job_root, f"chk-{checkpoint_id}", METADATA_FILE)

    def _pointer(self, checkpoint_id: int) -> CompletedCheckpointPointer:
        return CompletedCheckpointPointer(checkpoint_id, self.fs.unstrip_protocol(
            posixpath.join(self.job_root, f"chk-{checkpoint_id}")), job_id=self.job_id)


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoints under ``checkpoint_dir`` (any fsspec URL). Options: ``memory-threshold``
    (``OPTIONS``); ``storage_options`` go to fsspec (credentials, endpoints)."""

    name = "filesystem"
    takes_directory = True
    writes_files = True
    shared_files = True
    test_support = "statekit.conformance_tests.storage_support:FileSystemTestSupport"

    def __init__(self, checkpoint_dir: str, storage_options: dict[str, Any] | None = None, **options: Any) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.storage_options = dict(storage_options or {})
        self.memory_threshold: int = OPTIONS.parse(options)["memory-threshold"]
        open_url(checkpoint_dir, CHECKPOINT_DIR_SETTING, self.storage_options)  # fail early on a bad URL

    def create_access(self, job_id: str) -> FileSystemStorageAccess:
        check_job_id(job_id)
        fs, root = open_url(self.checkpoint_dir, CHECKPOINT_DIR_SETTING, self.storage_options)
        check_writable(fs, posixpath.join(root, job_id), CHECKPOINT_DIR_SETTING, self.checkpoint_dir)
        return FileSystemStorageAccess(fs, root, job_id, self.memory_threshold)

    def resolve_checkpoint(self, external_pointer: str,
                           setting: str = "spark.statekit.restore.path") -> ResolvedCheckpoint:
        return resolve(external_pointer, self._options_for(external_pointer), setting)

    def savepoint_location(self, savepoint_dir: str, savepoint_id: str) -> SavepointLocation:
        return SavepointLocation(savepoint_dir, savepoint_id, self._options_for(savepoint_dir), self.memory_threshold)

    def _options_for(self, url: str) -> dict[str, Any]:
        """The fsspec options (credentials, endpoint) of the checkpoint directory, for a URL on the
        same file system; none for another one."""
        same = fsspec.core.split_protocol(url)[0] == fsspec.core.split_protocol(self.checkpoint_dir)[0]
        return self.storage_options if same else {}

    def __repr__(self) -> str:
        return f"FileSystemCheckpointStorage({self.checkpoint_dir!r})"
