"""Returns whatever bytes it finds: no size or checksum check on read."""
from __future__ import annotations

import posixpath

from statekit.spi.handles import InlineStateHandle, StreamStateHandle
from statekit.spi.storage import CheckpointStreams
from statekit.storage.filesystem import FileSystemCheckpointStorage, FileSystemCheckpointStreams, FileSystemStorageAccess


class UncheckedStreams(FileSystemCheckpointStreams):
    def read(self, handle: StreamStateHandle) -> bytes:
        if isinstance(handle, InlineStateHandle):
            return handle.data
        return self._cat(self._path(handle), None, None)


class UncheckedAccess(FileSystemStorageAccess):
    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return UncheckedStreams(self.fs, self.job_root, f"chk-{checkpoint_id}", self.memory_threshold)

    def restore_streams(self) -> CheckpointStreams:
        return UncheckedStreams(self.fs, self.job_root, None, self.memory_threshold)


class IgnoresChecksumsStorage(FileSystemCheckpointStorage):
    name = "ignores-checksums"

    def create_access(self, job_id: str) -> UncheckedAccess:
        access = super().create_access(job_id)
        return UncheckedAccess(access.fs, posixpath.dirname(access.job_root), job_id, access.memory_threshold)
