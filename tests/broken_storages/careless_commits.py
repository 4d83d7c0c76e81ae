"""Two storages that write checkpoints on this machine's disk without the care a crash needs.

Both are the ``filesystem`` storage with a commit of their own (and ``UnsyncedStorage`` with streams
of its own). On ``file://`` directories:

* ``UnsyncedStorage`` never fsyncs: its stream files, the temporary ``_metadata`` it renames into
  place (atomically) and the directories naming them may be only in the page cache when a handle
  or a commit says they exist. An OS crash or a power loss can lose a completed checkpoint.
* ``CopyingRenameStorage`` syncs everything, but "renames" its temporary ``_metadata`` into place by
  copying it and deleting the original: a crash during the copy leaves a ``_metadata`` that is
  there (so the checkpoint looks complete) and holds part of the bytes, or none.
"""
from __future__ import annotations

import posixpath
import uuid

from fsspec.implementations.local import LocalFileSystem

from statekit.spi.errors import SnapshotError
from statekit.spi.storage import CheckpointStreams, CompletedCheckpointPointer
from statekit.storage.durability import sync_to_disk
from statekit.storage.filesystem import FileSystemCheckpointStorage, FileSystemStorageAccess
from statekit.storage.files import FileSystemCheckpointStreams


class ByHandCommit(FileSystemStorageAccess):
    """Commits ``_metadata`` through ``_put``; a repeated commit of the same bytes is idempotent."""

    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        path = self._metadata_path(checkpoint_id)
        if self.fs.exists(path):
            if self.fs.cat_file(path) != metadata:
                raise SnapshotError(f"{path} already exists with different content")
            return self._pointer(checkpoint_id)
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        temporary = f"{path}.inprogress-{uuid.uuid4().hex}"
        self.fs.pipe_file(temporary, metadata)
        self._put(temporary, path)
        return self._pointer(checkpoint_id)

    def _put(self, temporary: str, path: str) -> None:
        raise NotImplementedError


class _NotThisMachine(LocalFileSystem):
    """This machine's file system under another protocol name: statekit's helpers, which sync only
    ``file://`` paths, take it for a remote file system that makes files durable on close."""

    protocol = ("unsynced",)


class UnsyncedAccess(ByHandCommit):
    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return FileSystemCheckpointStreams(_NotThisMachine(), self.job_root, f"chk-{checkpoint_id}",
                                           self.memory_threshold)

    def _put(self, temporary: str, path: str) -> None:
        self.fs.mv(temporary, path)  # an atomic rename, of bytes not yet on the disk


class CopyingRenameAccess(ByHandCommit):
    def _put(self, temporary: str, path: str) -> None:
        sync_to_disk(temporary)
        self.fs.copy(temporary, path)  # not atomic: _metadata exists before all its bytes do
        sync_to_disk(path)
        self.fs.rm_file(temporary)


class _Careless(FileSystemCheckpointStorage):
    access_class: type[ByHandCommit]

    def create_access(self, job_id: str) -> ByHandCommit:
        access = super().create_access(job_id)
        return self.access_class(access.fs, posixpath.dirname(access.job_root), job_id, access.memory_threshold)


class UnsyncedStorage(_Careless):
    name = "unsynced"
    access_class = UnsyncedAccess


class CopyingRenameStorage(_Careless):
    name = "copying-rename"
    access_class = CopyingRenameAccess
