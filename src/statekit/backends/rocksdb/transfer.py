"""Moving RocksDB files between an instance directory and checkpoint storage: in chunks (an SST
file is never held in memory whole), or as hard links where the storage allows."""
from __future__ import annotations

import os

from statekit.backends.rocksdb.handle import IncrementalRocksDBStateHandle
from statekit.spi.handles import StreamStateHandle
from statekit.spi.storage import CheckpointStreams, StateScope

#: bytes per read when a file is uploaded
UPLOAD_CHUNK = 4 << 20


def download(handle: IncrementalRocksDBStateHandle, streams: CheckpointStreams, directory: str) -> None:
    """The files of ``handle`` into ``directory``. SST files are hard-linked where the storage can
    (``CheckpointStreams.link_to``): RocksDB never writes to an SST file, only deletes it, so
    the stored file stays as it is. The private files are always copied: opening the database
    rewrites some of them in place (rocksdict's config file)."""
    os.makedirs(directory, exist_ok=True)
    for name, stream in handle.shared.items():
        if not streams.link_to(stream, os.path.join(directory, name)):
            _copy(streams, stream, os.path.join(directory, name))
    for name, stream in handle.private.items():
        _copy(streams, stream, os.path.join(directory, name))


def _copy(streams: CheckpointStreams, stream: StreamStateHandle, path: str) -> None:
    with open(path, "wb") as f:
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
