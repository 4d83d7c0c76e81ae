"""Moving RocksDB files between an instance directory and checkpoint storage, in chunks (an SST
file is never held in memory whole)."""
from __future__ import annotations

import os

from statekit.backends.rocksdb.handle import IncrementalRocksDBStateHandle
from statekit.spi.handles import StreamStateHandle
from statekit.spi.storage import CheckpointStreams, StateScope

#: bytes per read when a file is uploaded
UPLOAD_CHUNK = 4 << 20


def download(handle: IncrementalRocksDBStateHandle, streams: CheckpointStreams, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, stream in {**handle.shared, **handle.private}.items():
        with open(os.path.join(directory, name), "wb") as f:
            streams.copy_to(stream, f)  # in chunks: an SST file is never held in memory whole


def upload(directory: str, name: str, streams: CheckpointStreams, scope: StateScope) -> StreamStateHandle:
    out = streams.create_output(scope, name=name)
    try:
        with open(os.path.join(directory, name), "rb") as f:
            while chunk := f.read(UPLOAD_CHUNK):
                out.write(chunk)
        return out.close_and_get_handle()
    except BaseException:
        out.discard()
        raise
