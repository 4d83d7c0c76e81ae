"""Moving RocksDB files from checkpoint storage into an instance directory: in chunks (an SST
file is never held in memory whole), or as hard links where the storage allows. Uploads go
through ``CheckpointStreams.upload_file``."""
from __future__ import annotations

import os

from statekit.backends.rocksdb.handle import IncrementalRocksDBStateHandle
from statekit.spi.handles import StreamStateHandle
from statekit.spi.storage import CheckpointStreams


def download(handle: IncrementalRocksDBStateHandle, streams: CheckpointStreams, directory: str) -> None:
    """The files of ``handle`` into ``directory``. SST files (shared ones, and a full native
    checkpoint's own) are hard-linked where the storage can (``CheckpointStreams.link_to``):
    RocksDB never writes to an SST file, only deletes it, so the stored file stays as it is. The
    other files are always copied: opening the database rewrites some of them in place
    (rocksdict's config file)."""
    os.makedirs(directory, exist_ok=True)
    for name, stream in (*handle.shared.items(), *handle.private.items()):
        path = os.path.join(directory, name)
        if not (name.endswith(".sst") and streams.link_to(stream, path)):
            _copy(streams, stream, path)


def _copy(streams: CheckpointStreams, stream: StreamStateHandle, path: str) -> None:
    with open(path, "wb") as f:
        streams.copy_to(stream, f)  # in chunks: an SST file is never held in memory whole

