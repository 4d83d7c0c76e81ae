"""Stores identical bytes once, by digest, and deletes them with the first checkpoint that goes.

The ``filesystem`` storage, except that an exclusive stream becomes ``objects/<sha256>`` under the
job directory (written only when no object has those bytes yet), and each checkpoint lists the
digests it wrote in ``chk-<n>/_objects/``. Disposing (or aborting) a checkpoint deletes the objects
it lists, without asking whether another checkpoint, retained or still being written, lists the
same digest: it counts no references and takes no lock.
"""
from __future__ import annotations

import hashlib
import posixpath

from statekit.spi.handles import FileStateHandle, InlineStateHandle, StreamStateHandle, checksum
from statekit.spi.storage import (
    CheckpointOutputStream, CheckpointStreams, CompletedCheckpointPointer, StateScope,
)
from statekit.storage.durability import is_local, make_directories, sync_to_disk
from statekit.storage.filesystem import FileSystemCheckpointStorage, FileSystemStorageAccess
from statekit.storage.files import FileSystemCheckpointStreams
from statekit.storage.inline import InlineOutputStream

OBJECTS = "objects"
LISTED = "_objects"


class ObjectOutputStream(InlineOutputStream):
    """Buffers the stream; on close, small bytes stay inline and others become an object."""

    def __init__(self, streams: "ContentAddressedStreams") -> None:
        super().__init__()
        self._streams = streams

    def close_and_get_handle(self) -> StreamStateHandle:
        data = bytes(self._buffer)
        self.discard()
        if len(data) <= self._streams.memory_threshold:
            return InlineStateHandle(data)
        return self._streams.store(data)


class ContentAddressedStreams(FileSystemCheckpointStreams):
    def create_output(self, scope: StateScope = StateScope.EXCLUSIVE,
                      name: str | None = None) -> CheckpointOutputStream:
        if scope is StateScope.SHARED:
            return super().create_output(scope, name)
        return ObjectOutputStream(self)

    def upload_file(self, path: str, scope: StateScope, name: str, move: bool = False) -> StreamStateHandle:
        return CheckpointStreams.upload_file(self, path, scope, name, move)

    def store(self, data: bytes) -> FileStateHandle:
        digest = hashlib.sha256(data).hexdigest()
        relative = posixpath.join(OBJECTS, digest)
        path = posixpath.join(self.root, relative)
        if not self.fs.exists(path):  # identical bytes are stored once
            self._put(path, data)
        self._put(posixpath.join(self.root, self.exclusive_dir, LISTED, digest), b"")
        return FileStateHandle(relative, len(data), checksum(data))

    def _put(self, path: str, data: bytes) -> None:
        make_directories(self.fs, posixpath.dirname(path))
        self.fs.pipe_file(path, data)
        if is_local(self.fs):
            sync_to_disk(path)


class ContentAddressedAccess(FileSystemStorageAccess):
    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return ContentAddressedStreams(self.fs, self.job_root, f"chk-{checkpoint_id}", self.memory_threshold)

    def abort(self, checkpoint_id: int) -> None:
        if not self.fs.exists(self._metadata_path(checkpoint_id)):
            self._delete_objects(checkpoint_id, frozenset())
        super().abort(checkpoint_id)

    def dispose(self, pointer: CompletedCheckpointPointer, keep: frozenset[str] = frozenset()) -> None:
        self._rm_file(self._metadata_path(pointer.checkpoint_id))
        self._delete_objects(pointer.checkpoint_id, keep)
        super().dispose(pointer, keep)

    def _delete_objects(self, checkpoint_id: int, keep: frozenset[str]) -> None:
        listed = posixpath.join(self.job_root, f"chk-{checkpoint_id}", LISTED)
        try:
            digests = [posixpath.basename(path) for path in self.fs.ls(listed, detail=False)]
        except FileNotFoundError:
            return
        for digest in digests:  # the mistake: another checkpoint may list the same digest
            if posixpath.join(OBJECTS, digest) not in keep:
                self._rm_file(posixpath.join(self.job_root, OBJECTS, digest))


class ContentAddressedStorage(FileSystemCheckpointStorage):
    name = "content-addressed"

    def create_access(self, job_id: str) -> ContentAddressedAccess:
        access = super().create_access(job_id)
        return ContentAddressedAccess(access.fs, posixpath.dirname(access.job_root), job_id, access.memory_threshold)
