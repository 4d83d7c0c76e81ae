"""Incremental RocksDB snapshots (Flink's): the asynchronous part of a native checkpoint."""
from __future__ import annotations

import os
import shutil
from typing import Any, Callable

from statekit.backends.rocksdb.handle import IncrementalRocksDBStateHandle
from statekit.backends.rocksdb.transfer import upload
from statekit.spi.backend import PendingSnapshot
from statekit.spi.errors import SnapshotError
from statekit.spi.handles import StateHandle, StateMetaInfo, StreamStateHandle
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.storage import CheckpointStreams, StateScope


class IncrementalSnapshot(PendingSnapshot):
    """Uploads a native checkpoint directory: SST files a completed checkpoint holds (``confirmed``)
    are referenced again, new ones are uploaded in shared scope, the rest (manifest, options)
    always in exclusive scope; ``uploaded`` learns which SST files the checkpoint holds."""

    def __init__(self, checkpoint_dir: str, confirmed: dict[str, StreamStateHandle],
                 uploaded: Callable[[int, dict[str, StreamStateHandle]], None], key_group_range: KeyGroupRange,
                 checkpoint_id: int, backend_id: str, metas: list[StateMetaInfo], key_serializer: dict[str, Any]
                 ) -> None:
        self._dir = checkpoint_dir
        self._confirmed = confirmed
        self._uploaded = uploaded
        self._key_group_range = key_group_range
        self._checkpoint_id = checkpoint_id
        self._backend_id = backend_id
        self._metas = metas
        self._key_serializer = key_serializer

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        try:
            shared: dict[str, StreamStateHandle] = {}
            private: dict[str, StreamStateHandle] = {}
            for name in sorted(os.listdir(self._dir)):
                if name.endswith(".sst"):
                    reused = self._confirmed.get(name)
                    shared[name] = reused if reused is not None else upload(self._dir, name, streams, StateScope.SHARED)
                else:
                    private[name] = upload(self._dir, name, streams, StateScope.EXCLUSIVE)
            self._uploaded(self._checkpoint_id, shared)
            return IncrementalRocksDBStateHandle(self._key_group_range, self._checkpoint_id, self._backend_id,
                                                 shared, private, self._key_serializer, tuple(self._metas))
        except OSError as exc:
            raise SnapshotError(f"cannot read RocksDB checkpoint files in {self._dir}: {exc}") from exc
        finally:
            self.release()

    def release(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
