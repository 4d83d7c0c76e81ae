"""The ``filesystem`` storage: checkpoints on any fsspec URL (file://, s3://, memory://, ...).

Layout: ``statekit.storage.layout`` (Flink's).

Handles record paths relative to the job directory (checkpoints) or the savepoint directory
(savepoints), so a savepoint can be moved. Streams smaller than ``memory_threshold`` bytes are
kept inline in the metadata instead of becoming files (Flink's ``fs.memory-threshold``).

Every failed file-system operation is a statekit error naming the path and the setting the
location came from (``spark.statekit.checkpoint.dir`` or ``spark.statekit.savepoint.dir``).
"""
from __future__ import annotations

import posixpath
import uuid
from typing import Any, BinaryIO

import fsspec

from statekit.spi.errors import ConfigurationError, CorruptStateError, RestoreError, SnapshotError
from statekit.spi.handles import (
    FileStateHandle, InlineStateHandle, StreamChecksum, StreamStateHandle, verify_checksum,
)
from statekit.spi.names import check_job_id
from statekit.spi.options import Option, OptionSet, size
from statekit.spi.storage import (
    CheckpointOutputStream, CheckpointStorage, CheckpointStorageAccess, CheckpointStreams,
    CompletedCheckpointPointer, ResolvedCheckpoint, SavepointTarget, StateScope,
)
from statekit.storage.layout import CHECKPOINT_DIR_PATTERN, METADATA_FILE, OWNER_FILE, SAVEPOINT_PREFIX, SHARED_DIR
from statekit.storage.urls import CHECKPOINT_DIR_SETTING, io_failure, open_url

DEFAULT_MEMORY_THRESHOLD = 20 * 1024
#: bytes per read when a file is copied (``copy_to``)
COPY_CHUNK = 8 << 20
SAVEPOINT_DIR_SETTING = "spark.statekit.savepoint.dir"
OPTIONS = OptionSet("spark.statekit.checkpoint.filesystem.",
                    Option("memory-threshold", size(minimum=0, maximum=1 << 30), DEFAULT_MEMORY_THRESHOLD,
                           "streams up to this size stay inline in _metadata instead of becoming files"))
#: file systems whose rename is atomic, so _metadata is written to a temporary name first;
#: object stores get a single PUT, which is atomic by itself
_RENAMING_PROTOCOLS = {"file", "local", "hdfs", "arrow_hdfs", "webhdfs", "viewfs"}


def _protocol(fs: fsspec.AbstractFileSystem) -> str:
    protocol = fs.protocol
    return protocol[0] if isinstance(protocol, (tuple, list)) else protocol


def _join(*parts: str) -> str:
    return posixpath.join(*parts)


class FileSystemOutputStream(CheckpointOutputStream):
    """Buffers up to the memory threshold, then streams to a file; checksums as it writes."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, relative_path: str, memory_threshold: int,
                 setting: str = CHECKPOINT_DIR_SETTING) -> None:
        super().__init__()
        self._fs = fs
        self._root = root
        self._relative = relative_path
        self._threshold = memory_threshold
        self._setting = setting
        self._buffer = bytearray()
        self._file: Any = None
        self._size = 0
        self._hasher = StreamChecksum()

    @property
    def path(self) -> str:
        return _join(self._root, self._relative)

    def write(self, data) -> int:  # type: ignore[no-untyped-def,override]
        if self.closed:
            raise SnapshotError(f"write to closed checkpoint stream {self.path}")
        n = memoryview(data).nbytes
        self._hasher.update(data)
        self._size += n
        try:
            if self._file is None:
                self._buffer += data
                if len(self._buffer) > self._threshold:
                    self._open_file()
            else:
                self._file.write(data)
        except OSError as exc:
            raise SnapshotError(io_failure("write checkpoint file", self.path, exc, self._setting)) from exc
        return n

    def _open_file(self) -> None:
        self._fs.makedirs(posixpath.dirname(self.path), exist_ok=True)
        self._file = self._fs.open(self.path, "wb")
        self._file.write(bytes(self._buffer))
        self._buffer = bytearray()

    def tell(self) -> int:
        return self._size

    def close_and_get_handle(self) -> StreamStateHandle:
        try:
            if self._file is None:
                handle: StreamStateHandle = InlineStateHandle(bytes(self._buffer))
            else:
                self._file.close()
                handle = FileStateHandle(self._relative, self._size, self._hasher.hexdigest())
        except OSError as exc:
            self.discard()
            raise SnapshotError(io_failure("finish checkpoint file", self.path, exc, self._setting)) from exc
        self._buffer = bytearray()
        self.close()
        return handle

    def discard(self) -> None:
        self._buffer = bytearray()
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            try:
                self._fs.rm_file(self.path)
            except (OSError, FileNotFoundError):
                pass
            self._file = None
        self.close()


class FileSystemCheckpointStreams(CheckpointStreams):
    """Reads any handle relative to ``root``; writes exclusive files under ``exclusive_dir``."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, exclusive_dir: str | None = None,
                 memory_threshold: int = DEFAULT_MEMORY_THRESHOLD, setting: str = CHECKPOINT_DIR_SETTING) -> None:
        self.fs = fs
        self.root = root
        self.exclusive_dir = exclusive_dir
        self.memory_threshold = memory_threshold
        self.setting = setting

    def create_output(self, scope: StateScope = StateScope.EXCLUSIVE,
                      name: str | None = None) -> CheckpointOutputStream:
        directory = SHARED_DIR if scope is StateScope.SHARED else self.exclusive_dir
        if directory is None:
            raise SnapshotError("these checkpoint streams are read-only")
        file_name = f"{name or 'state'}-{uuid.uuid4().hex}"
        return FileSystemOutputStream(self.fs, self.root, _join(directory, file_name), self.memory_threshold,
                                      self.setting)

    def read(self, handle: StreamStateHandle) -> bytes:
        if isinstance(handle, InlineStateHandle):
            return handle.data
        path = self._path(handle)
        data = self._cat(path, None, None)
        if len(data) != handle.size:
            raise CorruptStateError(f"checkpoint file {path} is truncated or was changed: {len(data)} bytes, "
                                    f"its handle records {handle.size}")
        verify_checksum(data, handle.checksum, f"checkpoint file {path}")
        return data

    def copy_to(self, handle: StreamStateHandle, target: BinaryIO) -> None:
        if isinstance(handle, InlineStateHandle):
            target.write(self.read(handle))
            return
        path = self._path(handle)
        checksum, size = StreamChecksum(), 0
        try:
            with self.fs.open(path, "rb") as source:
                while chunk := source.read(COPY_CHUNK):
                    checksum.update(chunk)
                    target.write(chunk)
                    size += len(chunk)
        except FileNotFoundError as exc:
            raise RestoreError(f"checkpoint file {path} is missing; it was deleted or the checkpoint was "
                               f"moved (only savepoints are relocatable)") from exc
        except OSError as exc:
            raise RestoreError(io_failure("read checkpoint file", path, exc, self.setting)) from exc
        if size != handle.size:
            raise CorruptStateError(f"checkpoint file {path} is truncated or was changed: {size} bytes, "
                                    f"its handle records {handle.size}")
        checksum.verify(handle.checksum, size, f"checkpoint file {path}")

    def read_range(self, handle: StreamStateHandle, offset: int, length: int) -> bytes:
        if isinstance(handle, InlineStateHandle):
            data = handle.data[offset:offset + length]
            path = "inline state"
        else:
            path = self._path(handle)
            # an empty range is b"": object stores answer start == end with the whole object
            data = self._cat(path, offset, offset + length) if length > 0 else b""
        if len(data) != length:
            raise CorruptStateError(f"{path} is truncated: wanted bytes [{offset}, {offset + length}) but "
                                    f"got {len(data)}")
        return data

    def _path(self, handle: StreamStateHandle) -> str:
        if not isinstance(handle, FileStateHandle):
            raise RestoreError(f"the filesystem storage cannot read a {type(handle).__name__}")
        return _join(self.root, handle.path)

    def _cat(self, path: str, start: int | None, end: int | None) -> bytes:
        try:
            return self.fs.cat_file(path, start=start, end=end)
        except FileNotFoundError as exc:
            raise RestoreError(f"checkpoint file {path} is missing; it was deleted or the checkpoint was "
                               f"moved (only savepoints are relocatable)") from exc
        except OSError as exc:
            # object stores refuse a range past the end (S3: InvalidRange) instead of a short read
            size = self._size(path) if end is not None else None
            if size is not None and size < end:  # type: ignore[operator]
                raise CorruptStateError(f"checkpoint file {path} is truncated: wanted bytes [{start}, {end}) but "
                                        f"it has {size}") from exc
            raise RestoreError(io_failure("read checkpoint file", path, exc, self.setting)) from exc

    def _size(self, path: str) -> int | None:
        try:
            return int(self.fs.size(path))
        except (OSError, TypeError, ValueError):
            return None


def write_metadata_atomically(fs: fsspec.AbstractFileSystem, path: str, data: bytes,
                              setting: str = CHECKPOINT_DIR_SETTING) -> None:
    """Write ``_metadata`` so readers see all of it or nothing; never replace different content."""
    try:
        if fs.exists(path):
            if fs.cat_file(path) == data:
                return
            raise SnapshotError(f"{path} already exists with different content; a completed checkpoint is never "
                                f"overwritten (discard it explicitly first)")
    except OSError as exc:
        raise SnapshotError(io_failure("read checkpoint metadata", path, exc, setting)) from exc
    replace_atomically(fs, path, data, setting)


def replace_atomically(fs: fsspec.AbstractFileSystem, path: str, data: bytes, setting: str) -> None:
    """Write ``path`` so readers see the old content or all of the new: a temporary file renamed
    over it on file systems, one PUT on object stores."""
    try:
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        if _protocol(fs) in _RENAMING_PROTOCOLS:
            temporary = f"{path}.inprogress-{uuid.uuid4().hex}"
            fs.pipe_file(temporary, data)
            fs.mv(temporary, path)
        else:
            fs.pipe_file(path, data)
    except OSError as exc:
        raise SnapshotError(io_failure("write", path, exc, setting)) from exc


class FileSystemStorageAccess(CheckpointStorageAccess):
    def __init__(self, fs: fsspec.AbstractFileSystem, checkpoint_root: str, job_id: str, memory_threshold: int) -> None:
        self.fs = fs
        self.job_root = _join(checkpoint_root, job_id)
        self.job_id = job_id
        self.memory_threshold = memory_threshold

    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return FileSystemCheckpointStreams(self.fs, self.job_root, f"chk-{checkpoint_id}", self.memory_threshold)

    def restore_streams(self) -> CheckpointStreams:
        return FileSystemCheckpointStreams(self.fs, self.job_root, None, self.memory_threshold)

    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        write_metadata_atomically(self.fs, self._metadata_path(checkpoint_id), metadata)
        return self._pointer(checkpoint_id)

    def abort(self, checkpoint_id: int) -> None:
        directory = _join(self.job_root, f"chk-{checkpoint_id}")
        try:
            if self.fs.exists(self._metadata_path(checkpoint_id)):
                raise SnapshotError(f"checkpoint {checkpoint_id} is complete and cannot be aborted")
            self._rm_tree(directory)
        except OSError as exc:
            raise SnapshotError(io_failure("remove the aborted checkpoint", directory, exc,
                                           CHECKPOINT_DIR_SETTING)) from exc

    def completed(self) -> list[CompletedCheckpointPointer]:
        try:
            entries = self.fs.ls(self.job_root, detail=False)
            ids = sorted(int(m.group(1)) for entry in entries
                         if (m := CHECKPOINT_DIR_PATTERN.match(posixpath.basename(entry.rstrip("/")))))
            return [self._pointer(i) for i in ids if self.fs.exists(self._metadata_path(i))]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RestoreError(io_failure("list the checkpoints in", self.job_root, exc, CHECKPOINT_DIR_SETTING)) \
                from exc

    def latest_completed(self) -> CompletedCheckpointPointer | None:
        completed = self.completed()
        return completed[-1] if completed else None

    def read_metadata(self, pointer: CompletedCheckpointPointer) -> bytes:
        path = self._metadata_path(pointer.checkpoint_id)
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            raise RestoreError(f"{path} does not exist: checkpoint {pointer.checkpoint_id} is not complete") from None
        except OSError as exc:
            raise RestoreError(io_failure("read checkpoint metadata", path, exc, CHECKPOINT_DIR_SETTING)) from exc

    def read_owner(self) -> bytes | None:
        path = _join(self.job_root, OWNER_FILE)
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RestoreError(io_failure("read the job's owner record", path, exc, CHECKPOINT_DIR_SETTING)) from exc

    def write_owner(self, record: bytes) -> None:
        replace_atomically(self.fs, _join(self.job_root, OWNER_FILE), record, CHECKPOINT_DIR_SETTING)

    def dispose(self, pointer: CompletedCheckpointPointer, keep: frozenset[str] = frozenset()) -> None:
        directory = _join(self.job_root, f"chk-{pointer.checkpoint_id}")
        try:
            # _metadata goes first: a half-deleted checkpoint must never look complete
            self._rm_file(self._metadata_path(pointer.checkpoint_id))
            if not keep:
                self._rm_tree(directory)
                return
            try:
                files = self.fs.find(directory)
            except FileNotFoundError:
                return
            for path in files:
                if posixpath.relpath(path, self.job_root) not in keep:
                    self._rm_file(path)
        except OSError as exc:
            raise SnapshotError(io_failure("delete checkpoint", directory, exc, CHECKPOINT_DIR_SETTING)) from exc

    def is_shared(self, handle: StreamStateHandle) -> bool:
        return isinstance(handle, FileStateHandle) and handle.path.startswith(SHARED_DIR + "/")

    def discard_shared(self, handle: StreamStateHandle) -> None:
        if self.is_shared(handle):
            path = _join(self.job_root, handle.path)  # type: ignore[attr-defined]
            try:
                self._rm_file(path)
            except OSError as exc:
                raise SnapshotError(io_failure("delete shared file", path, exc, CHECKPOINT_DIR_SETTING)) from exc

    def _rm_file(self, path: str) -> None:
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass

    def _rm_tree(self, directory: str) -> None:
        try:
            self.fs.rm(directory, recursive=True)
        except FileNotFoundError:
            pass

    def _metadata_path(self, checkpoint_id: int) -> str:
        return _join(self.job_root, f"chk-{checkpoint_id}", METADATA_FILE)

    def _pointer(self, checkpoint_id: int) -> CompletedCheckpointPointer:
        return CompletedCheckpointPointer(checkpoint_id, self.fs.unstrip_protocol(
            _join(self.job_root, f"chk-{checkpoint_id}")))


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoints under ``checkpoint_dir`` (any fsspec URL). Options: ``memory-threshold``
    (``OPTIONS``); ``storage_options`` go to fsspec (credentials, endpoints)."""

    name = "filesystem"
    takes_directory = True
    writes_files = True
    shared_files = True
    test_support = "statekit.conformance_tests.storage_support:FileSystemTestSupport"

    def __init__(self, checkpoint_dir: str, storage_options: dict[str, Any] | None = None, **options: Any) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.storage_options = dict(storage_options or {})
        self.memory_threshold: int = OPTIONS.parse(options)["memory-threshold"]
        open_url(checkpoint_dir, CHECKPOINT_DIR_SETTING, self.storage_options)  # fail early on a bad URL

    def create_access(self, job_id: str) -> FileSystemStorageAccess:
        check_job_id(job_id)
        fs, root = open_url(self.checkpoint_dir, CHECKPOINT_DIR_SETTING, self.storage_options)
        check_writable(fs, _join(root, job_id), CHECKPOINT_DIR_SETTING, self.checkpoint_dir)
        return FileSystemStorageAccess(fs, root, job_id, self.memory_threshold)

    def resolve_checkpoint(self, external_pointer: str,
                           setting: str = "spark.statekit.restore.path") -> ResolvedCheckpoint:
        return resolve(external_pointer, self._options_for(external_pointer), setting)

    def savepoint_location(self, savepoint_dir: str, savepoint_id: str) -> SavepointLocation:
        return SavepointLocation(savepoint_dir, savepoint_id, self._options_for(savepoint_dir), self.memory_threshold)

    def _options_for(self, url: str) -> dict[str, Any]:
        """The fsspec options (credentials, endpoint) of the checkpoint directory, for a URL on the
        same file system; none for another one."""
        same = fsspec.core.split_protocol(url)[0] == fsspec.core.split_protocol(self.checkpoint_dir)[0]
        return self.storage_options if same else {}

    def __repr__(self) -> str:
        return f"FileSystemCheckpointStorage({self.checkpoint_dir!r})"


def check_writable(fs: fsspec.AbstractFileSystem, directory: str, setting: str, url: str) -> None:
    """Create ``directory`` and write and delete a probe file in it, or fail naming the setting."""
    probe = _join(directory, f".statekit-probe-{uuid.uuid4().hex}")
    try:
        fs.makedirs(directory, exist_ok=True)
        fs.pipe_file(probe, b"")
        fs.rm_file(probe)
    except (OSError, PermissionError) as exc:
        raise ConfigurationError(f"{setting}={url!r} is not writable ({type(exc).__name__}: {exc}); choose a "
                                 f"directory this process may write, or fix its permissions") from exc


# ---------------------------------------------------------------------------- savepoints and pointers


class SavepointLocation(SavepointTarget):
    """Where one savepoint is written: ``<savepoint-dir>/savepoint-<id>/``."""

    def __init__(self, savepoint_dir: str, savepoint_id: str, storage_options: dict[str, Any] | None = None,
                 memory_threshold: int = DEFAULT_MEMORY_THRESHOLD) -> None:
        fs, root = open_url(savepoint_dir, SAVEPOINT_DIR_SETTING, storage_options)
        self.fs = fs
        self.directory = _join(root, f"{SAVEPOINT_PREFIX}{savepoint_id}")
        check_writable(fs, self.directory, SAVEPOINT_DIR_SETTING, savepoint_dir)
        # a savepoint's files are all exclusive and live beside its _metadata
        self.streams = FileSystemCheckpointStreams(fs, self.directory, "", memory_threshold, SAVEPOINT_DIR_SETTING)

    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        write_metadata_atomically(self.fs, _join(self.directory, METADATA_FILE), metadata, SAVEPOINT_DIR_SETTING)
        return CompletedCheckpointPointer(checkpoint_id, self.fs.unstrip_protocol(self.directory), is_savepoint=True)


def resolve(url: str, storage_options: dict[str, Any] | None = None,
            setting: str = "spark.statekit.restore.path") -> ResolvedCheckpoint:
    """Find a completed snapshot by URL: a ``_metadata`` file, a ``chk-<n>`` or ``savepoint-<id>``
    directory, or a job directory (its latest completed checkpoint)."""
    fs, path = open_url(url, setting, storage_options)
    if posixpath.basename(path) == METADATA_FILE:
        path = posixpath.dirname(path)
    try:
        return _resolve(fs, path, url, setting)
    except OSError as exc:
        raise RestoreError(io_failure("read the snapshot at", path, exc, setting)) from exc


def _resolve(fs: fsspec.AbstractFileSystem, path: str, url: str, setting: str) -> ResolvedCheckpoint:
    metadata_path = _join(path, METADATA_FILE)
    if not fs.exists(metadata_path):
        match = CHECKPOINT_DIR_PATTERN.match(posixpath.basename(path))
        if match or not fs.exists(path):
            raise RestoreError(f"{setting}={url!r} is not a completed checkpoint or savepoint: {metadata_path} "
                               f"does not exist (a checkpoint without _metadata never completed)")
        access = FileSystemStorageAccess(fs, posixpath.dirname(path), posixpath.basename(path), DEFAULT_MEMORY_THRESHOLD)
        latest = access.latest_completed()
        if latest is None:
            raise RestoreError(f"{setting}={url!r} holds no completed checkpoint (no chk-<n>/_metadata)")
        path = _join(path, f"chk-{latest.checkpoint_id}")
        metadata_path = _join(path, METADATA_FILE)
    data = fs.cat_file(metadata_path)
    # checkpoint handles are relative to the job directory, savepoint handles to their own
    match = CHECKPOINT_DIR_PATTERN.match(posixpath.basename(path))
    root = posixpath.dirname(path) if match else path
    checkpoint_id = int(match.group(1)) if match else -1
    pointer = CompletedCheckpointPointer(checkpoint_id, fs.unstrip_protocol(path), is_savepoint=not match)
    return ResolvedCheckpoint(pointer, data, FileSystemCheckpointStreams(fs, root))
