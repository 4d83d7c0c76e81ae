"""Lists completed checkpoints by name as text, so ``chk-10`` comes before ``chk-9``."""
from __future__ import annotations

import posixpath

from statekit.spi.storage import CompletedCheckpointPointer
from statekit.storage.filesystem import FileSystemCheckpointStorage, FileSystemStorageAccess


class StringOrderAccess(FileSystemStorageAccess):
    def completed(self) -> list[CompletedCheckpointPointer]:
        return sorted(super().completed(), key=lambda pointer: f"chk-{pointer.checkpoint_id}")


class StringOrderStorage(FileSystemCheckpointStorage):
    name = "string-order"

    def create_access(self, job_id: str) -> StringOrderAccess:
        access = super().create_access(job_id)
        return StringOrderAccess(access.fs, posixpath.dirname(access.job_root), job_id, access.memory_threshold)
