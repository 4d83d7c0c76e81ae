"""Native RocksDB snapshots: the asynchronous part of a checkpoint in RocksDB's own files.

Incremental (Flink's strategy): SST files a completed checkpoint holds are referenced again, new
ones are uploaded in shared scope. Full (``SnapshotFormat.NATIVE``): every file is uploaded anew in
the checkpoint's exclusive scope, so the checkpoint stands alone and is deleted whole; no later
checkpoint references its files. The other files (manifest, options) are always exclusive.

Every file is uploaded with ``move``: the checkpoint directory is this snapshot's alone and is
deleted after the upload. Its SST files are hard links to the live instance's, which RocksDB never
writes to (it only deletes them), so a storage on the same local file system stores them by a
rename, without copying a byte.
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Callable

from statekit.backends.rocksdb.handle import IncrementalRocksDBStateHandle
from statekit.spi.backend import PendingSnapshot, released_snapshot
from statekit.spi.errors import SnapshotError
from statekit.spi.handles import StateHandle, StateMetaInfo, StreamStateHandle
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.storage import CheckpointStreams, StateScope


class NativeSnapshot(PendingSnapshot):
    """Uploads a native checkpoint directory. ``confirmed`` (incremental only): the SST files a
    completed checkpoint holds, referenced instead of uploaded; ``uploaded`` learns which SST files
    the checkpoint shares (none for a full one)."""

    def __init__(self, checkpoint_dir: str, incremental: bool, confirmed: dict[str, StreamStateHandle],
                 uploaded: Callable[[int, dict[str, StreamStateHandle]], None], key_group_range: KeyGroupRange,
                 checkpoint_id: int, backend_id: str, metas: list[StateMetaInfo], key_serializer: dict[str, Any]
                 ) -> None:
        self._dir = checkpoint_dir
        self._incremental = incremental
        self._confirmed = confirmed
        self._uploaded = uploaded
        self._key_group_range = key_group_range
        self._checkpoint_id = checkpoint_id
        self._backend_id = backend_id
        self._metas = metas
        self._key_serializer = key_serializer
        self._released = False

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        if self._released:
            raise released_snapshot()
        try:
            shared: dict[str, StreamStateHandle] = {}
            private: dict[str, StreamStateHandle] = {}
            for name in sorted(os.listdir(self._dir)):
                path = os.path.join(self._dir, name)
                if name.endswith(".sst") and self._incremental:
                    reused = self._confirmed.get(name)
                    shared[name] = reused if reused is not None else streams.upload_file(path, StateScope.SHARED, name,
                                                                                         move=True)
                else:
                    private[name] = streams.upload_file(path, StateScope.EXCLUSIVE, name, move=True)
            self._uploaded(self._checkpoint_id, shared)
            return IncrementalRocksDBStateHandle(self._key_group_range, self._checkpoint_id, self._backend_id,
                                                 shared, private, self._key_serializer, tuple(self._metas))
        except OSError as exc:
            raise SnapshotError(f"cannot read RocksDB checkpoint files in {self._dir}: {exc}") from exc
        finally:
            self.release()

    def release(self) -> None:
        self._released = True
        shutil.rmtree(self._dir, ignore_errors=True)
