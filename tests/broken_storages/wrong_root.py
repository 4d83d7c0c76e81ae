"""Builds handles relative to the checkpoint directory (``<job>/chk-<n>/<file>``, ``shared/<file>``)
instead of the job directory: its own access reads them back, but a checkpoint resolved by its
pointer (``spark.statekit.restore.path``) cannot, and shared files land outside the job."""
from __future__ import annotations

import posixpath
from typing import Any

import fsspec

from statekit.conformance_tests.storage_support import StorageTestSupport
from statekit.spi.handles import FileStateHandle, StreamStateHandle
from statekit.spi.storage import CheckpointStorage, CheckpointStreams
from statekit.storage.filesystem import FileSystemCheckpointStorage, FileSystemCheckpointStreams, FileSystemStorageAccess


class WrongRootAccess(FileSystemStorageAccess):
    @property
    def storage_root(self) -> str:
        return posixpath.dirname(self.job_root)

    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return FileSystemCheckpointStreams(self.fs, self.storage_root, f"{self.job_id}/chk-{checkpoint_id}",
                                           self.memory_threshold)

    def restore_streams(self) -> CheckpointStreams:
        return FileSystemCheckpointStreams(self.fs, self.storage_root, None, self.memory_threshold)


class WrongRootStorage(FileSystemCheckpointStorage):
    name = "wrong-root"
    test_support = "broken_storages.wrong_root:WrongRootSupport"

    def create_access(self, job_id: str) -> WrongRootAccess:
        access = super().create_access(job_id)
        return WrongRootAccess(access.fs, posixpath.dirname(access.job_root), job_id, access.memory_threshold)


class WrongRootSupport(StorageTestSupport):
    """Its author's test support, consistent with the storage: paths under the checkpoint directory."""

    def locate(self, storage: CheckpointStorage, job_id: str,
               handle: StreamStateHandle) -> tuple[fsspec.AbstractFileSystem, str] | None:
        if not isinstance(handle, FileStateHandle):
            return None
        files: Any = storage
        fs, root = fsspec.core.url_to_fs(files.checkpoint_dir)
        return fs, posixpath.join(root, handle.path)
