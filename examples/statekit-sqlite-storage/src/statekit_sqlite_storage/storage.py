"""The ``sqlite`` checkpoint storage: streams, checkpoints and owner records as rows of one
database file (``database.py``).

A stream larger than ``memory-threshold`` becomes a row of its own (a ``SQLiteStreamHandle``
naming it); a smaller one travels inline in the metadata. A checkpoint is complete when its
metadata row exists: that INSERT is its atomic commit. Savepoints are files, as with every
storage: they are written and resolved by statekit's file-system helpers.

Streams are buffered in memory until they close (one INSERT each), so a subtask's largest stream
must fit in memory: fine for an example, not for terabytes of state.
"""
from __future__ import annotations

import io
import os
import uuid
from typing import Any

from statekit.spi.errors import ConfigurationError, CorruptStateError, RestoreError, SnapshotError
from statekit.spi.handles import InlineStateHandle, StreamChecksum, StreamStateHandle, verify_checksum
from statekit.spi.names import check_job_id
from statekit.spi.options import Option, OptionSet, number, size, text
from statekit.spi.storage import (
    CheckpointOutputStream, CheckpointStorage, CheckpointStorageAccess, CheckpointStreams,
    CompletedCheckpointPointer, ResolvedCheckpoint, StateScope,
)
from statekit.storage.pointers import SavepointLocation, resolve
from statekit_sqlite_storage.database import Database
from statekit_sqlite_storage.handles import SHARED, SQLiteStreamHandle

OPTIONS = OptionSet(
    "spark.statekit.checkpoint.sqlite.",
    Option("path", text, None, "the database file holding every job's checkpoints (created if missing)"),
    Option("memory-threshold", size(minimum=0, maximum=1 << 30), 20 * 1024,
           "streams up to this size stay inline in the metadata instead of becoming rows"),
    Option("busy-timeout", number(positive=True), 60.0,
           "seconds a writer waits for another process's write to finish"),
)
PATH_SETTING = OPTIONS.setting("path")
#: an external pointer: ``sqlite:<database file>#<job>/chk-<n>``
POINTER_SCHEME = "sqlite:"


class SQLiteOutputStream(CheckpointOutputStream):
    def __init__(self, database: Database, stream_id: str, job_id: str, checkpoint_id: int, shared: bool,
                 memory_threshold: int) -> None:
        super().__init__()
        self._database = database
        self._row = (stream_id, job_id, checkpoint_id, int(shared))
        self._threshold = memory_threshold
        self._buffer = io.BytesIO()
        self._checksum = StreamChecksum()

    def write(self, data: Any) -> int:  # type: ignore[override]
        if self.closed:
            raise SnapshotError(f"write to closed checkpoint stream {self._row[0]}")
        self._checksum.update(data)
        return self._buffer.write(data)

    def tell(self) -> int:
        return self._buffer.tell()

    def close_and_get_handle(self) -> StreamStateHandle:
        data = self._buffer.getvalue()
        self.discard()
        if len(data) <= self._threshold:
            return InlineStateHandle(data)
        try:
            self._database.execute("INSERT INTO streams (id, job, checkpoint, shared, data) VALUES (?, ?, ?, ?, ?)",
                                   (*self._row, data))
        except Exception as exc:
            raise SnapshotError(f"cannot store stream {self._row[0]} ({self._database.describe(exc)})") from exc
        return SQLiteStreamHandle(self._row[0], len(data), self._checksum.hexdigest())

    def discard(self) -> None:
        self._buffer = io.BytesIO()
        self.close()


class SQLiteStreams(CheckpointStreams):
    """Reads every handle of the database; writes the streams of one checkpoint of one job
    (``job_id``/``checkpoint_id`` None: read only)."""

    def __init__(self, database: Database, job_id: str | None = None, checkpoint_id: int | None = None,
                 memory_threshold: int = 0) -> None:
        self.database = database
        self.job_id = job_id
        self.checkpoint_id = checkpoint_id
        self.memory_threshold = memory_threshold

    def create_output(self, scope: StateScope = StateScope.EXCLUSIVE,
                      name: str | None = None) -> CheckpointOutputStream:
        if self.job_id is None or self.checkpoint_id is None:
            raise SnapshotError("these checkpoint streams are read-only")
        shared = scope is StateScope.SHARED
        directory = SHARED if shared else f"chk-{self.checkpoint_id}"
        stream_id = f"{self.job_id}/{directory}/{name or 'state'}-{uuid.uuid4().hex}"
        return SQLiteOutputStream(self.database, stream_id, self.job_id, self.checkpoint_id, shared,
                                  self.memory_threshold)

    def read(self, handle: StreamStateHandle) -> bytes:
        if isinstance(handle, InlineStateHandle):
            verify_checksum(handle.data, handle.checksum, "inline state")
            return handle.data
        stream_id = self._stream_id(handle)
        data = self._select("data", stream_id)
        if len(data) != handle.size:
            raise CorruptStateError(f"stream {stream_id} in {self.database.path} is truncated or was changed: "
                                    f"{len(data)} bytes, its handle records {handle.size}")
        verify_checksum(data, handle.checksum, f"stream {stream_id} in {self.database.path}")
        return data

    def read_range(self, handle: StreamStateHandle, offset: int, length: int) -> bytes:
        if isinstance(handle, InlineStateHandle):
            data, what = handle.data[offset:offset + length], "inline state"
        else:
            what = f"stream {self._stream_id(handle)} in {self.database.path}"
            data = self._select("substr(data, ?, ?)", self._stream_id(handle), offset + 1, length) if length else b""
        if len(data) != length:
            raise CorruptStateError(f"{what} is truncated: wanted bytes [{offset}, {offset + length}) but got "
                                    f"{len(data)}")
        return bytes(data)

    def _stream_id(self, handle: StreamStateHandle) -> str:
        if not isinstance(handle, SQLiteStreamHandle):
            raise RestoreError(f"the sqlite storage cannot read a {type(handle).__name__}; restore it with the "
                               f"storage that wrote it")
        return handle.stream_id

    def _select(self, column: str, stream_id: str, *arguments: Any) -> bytes:
        try:
            row = self.database.execute(f"SELECT {column} FROM streams WHERE id = ?", (*arguments, stream_id)
                                        ).fetchone()
        except Exception as exc:
            raise RestoreError(f"cannot read stream {stream_id} ({self.database.describe(exc)})") from exc
        if row is None:
            raise RestoreError(f"stream {stream_id} is missing from {self.database.path}: it was deleted, or its "
                               f"checkpoint was disposed")
        return bytes(row[0])


class SQLiteStorageAccess(CheckpointStorageAccess):
    def __init__(self, database: Database, job_id: str, memory_threshold: int) -> None:
        self.database = database
        self.job_id = job_id
        self.memory_threshold = memory_threshold

    def streams(self, checkpoint_id: int, subtask: str) -> CheckpointStreams:
        return SQLiteStreams(self.database, self.job_id, checkpoint_id, self.memory_threshold)

    def restore_streams(self) -> CheckpointStreams:
        return SQLiteStreams(self.database)

    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        try:
            self.database.execute("INSERT OR IGNORE INTO checkpoints (job, checkpoint, metadata) VALUES (?, ?, ?)",
                                  (self.job_id, checkpoint_id, metadata))
            stored = self._metadata(checkpoint_id)
        except Exception as exc:
            raise SnapshotError(f"cannot commit checkpoint {checkpoint_id} of job {self.job_id} "
                                f"({self.database.describe(exc)})") from exc
        if stored != metadata:
            raise SnapshotError(f"checkpoint {checkpoint_id} of job {self.job_id} is already complete with "
                                f"different metadata in {self.database.path}; it is never overwritten")
        return self._pointer(checkpoint_id)

    def abort(self, checkpoint_id: int) -> None:
        if self._metadata(checkpoint_id) is not None:
            raise SnapshotError(f"checkpoint {checkpoint_id} of job {self.job_id} is complete and cannot be aborted")
        # its shared streams too: no completed checkpoint references them, and the coordinator
        # may not know their handles (subtasks that finished in a stage that failed)
        self.database.execute("DELETE FROM streams WHERE job = ? AND checkpoint = ?", (self.job_id, checkpoint_id))

    def completed(self) -> list[CompletedCheckpointPointer]:
        rows = self.database.execute("SELECT checkpoint FROM checkpoints WHERE job = ? ORDER BY checkpoint",
                                     (self.job_id,)).fetchall()
        return [self._pointer(row[0]) for row in rows]

    def latest_completed(self) -> CompletedCheckpointPointer | None:
        completed = self.completed()
        return completed[-1] if completed else None

    def read_metadata(self, pointer: CompletedCheckpointPointer) -> bytes:
        metadata = self._metadata(pointer.checkpoint_id)
        if metadata is None:
            raise RestoreError(f"checkpoint {pointer.checkpoint_id} of job {self.job_id} is not complete in "
                               f"{self.database.path}")
        return metadata

    def dispose(self, pointer: CompletedCheckpointPointer, keep: frozenset[str] = frozenset()) -> None:
        # the metadata row goes first: a half-disposed checkpoint must never look complete
        self.database.execute("DELETE FROM checkpoints WHERE job = ? AND checkpoint = ?",
                              (self.job_id, pointer.checkpoint_id))
        self._delete_exclusive(pointer.checkpoint_id, keep)

    def is_shared(self, handle: StreamStateHandle) -> bool:
        return isinstance(handle, SQLiteStreamHandle) and handle.shared

    def discard_shared(self, handle: StreamStateHandle) -> None:
        if isinstance(handle, SQLiteStreamHandle) and handle.shared:
            self.database.execute("DELETE FROM streams WHERE id = ?", (handle.stream_id,))

    def read_owner(self) -> bytes | None:
        record = self.database.one("SELECT record FROM owners WHERE job = ?", (self.job_id,))
        return None if record is None else bytes(record)

    def write_owner(self, record: bytes) -> None:
        self.database.execute("INSERT OR REPLACE INTO owners (job, record) VALUES (?, ?)", (self.job_id, record))

    def _metadata(self, checkpoint_id: int) -> bytes | None:
        metadata = self.database.one("SELECT metadata FROM checkpoints WHERE job = ? AND checkpoint = ?",
                                     (self.job_id, checkpoint_id))
        return None if metadata is None else bytes(metadata)

    def _delete_exclusive(self, checkpoint_id: int, keep: frozenset[str]) -> None:
        marks = ", ".join("?" * len(keep))
        self.database.execute(f"DELETE FROM streams WHERE job = ? AND checkpoint = ? AND shared = 0 "
                              f"AND id NOT IN ({marks})", (self.job_id, checkpoint_id, *sorted(keep)))

    def _pointer(self, checkpoint_id: int) -> CompletedCheckpointPointer:
        return CompletedCheckpointPointer(checkpoint_id, pointer_of(self.database.path, self.job_id, checkpoint_id))


def pointer_of(path: str, job_id: str, checkpoint_id: int) -> str:
    return f"{POINTER_SCHEME}{os.path.abspath(path)}#{job_id}/chk-{checkpoint_id}"


class SQLiteCheckpointStorage(CheckpointStorage):
    """Options (``OPTIONS``): ``path`` (required), ``memory-threshold``, ``busy-timeout``."""

    name = "sqlite"
    writes_files = True  # a stream above the threshold is stored apart from the metadata (a row)
    shared_files = True
    test_support = "statekit_sqlite_storage.testing:SQLiteStorageTestSupport"

    def __init__(self, **options: Any) -> None:
        values = OPTIONS.parse(options)
        if values["path"] is None:
            raise ConfigurationError(f"the sqlite checkpoint storage needs {PATH_SETTING} (the database file, "
                                     f"e.g. /data/checkpoints.db)")
        self.path: str = values["path"]
        self.memory_threshold: int = values["memory-threshold"]
        self.busy_timeout: float = values["busy-timeout"]

    def database(self, path: str | None = None) -> Database:
        return Database(path or self.path, self.busy_timeout, PATH_SETTING)

    def create_access(self, job_id: str) -> SQLiteStorageAccess:
        check_job_id(job_id)
        database = self.database()
        database.create()
        return SQLiteStorageAccess(database, job_id, self.memory_threshold)

    def resolve_checkpoint(self, external_pointer: str,
                           setting: str = "spark.statekit.restore.path") -> ResolvedCheckpoint:
        if not external_pointer.startswith(POINTER_SCHEME):
            return resolve(external_pointer, setting=setting)  # a savepoint or a file-system checkpoint
        path, _, location = external_pointer[len(POINTER_SCHEME):].partition("#")
        job_id, _, name = location.rpartition("/chk-")
        if not (job_id and name.isdigit() and os.path.isfile(path)):
            raise RestoreError(f"{setting}={external_pointer!r} is not a completed checkpoint of the sqlite storage "
                               f"(sqlite:<database file>#<job>/chk-<n>, an existing file)")
        access = SQLiteStorageAccess(self.database(path), job_id, self.memory_threshold)
        pointer = CompletedCheckpointPointer(int(name), external_pointer)
        try:
            metadata = access.read_metadata(pointer)
        except RestoreError as exc:
            raise RestoreError(f"{setting}={external_pointer!r}: {exc}") from exc
        return ResolvedCheckpoint(pointer, metadata, access.restore_streams())

    def savepoint_location(self, savepoint_dir: str, savepoint_id: str) -> SavepointLocation:
        return SavepointLocation(savepoint_dir, savepoint_id)

    def __repr__(self) -> str:
        return f"SQLiteCheckpointStorage(path={self.path!r})"

