"""The storage's test support for statekit's conformance suite (``test_support`` names it): a fresh
database file per test, a path that cannot hold one, and direct access to stored rows so the suite
can damage them (the errors name the stream id)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from statekit.conformance_tests.storage_support import StorageLocation, StorageTestSupport
from statekit.spi.handles import StreamStateHandle
from statekit.spi.storage import CheckpointStorage
from statekit_sqlite_storage.handles import SQLiteStreamHandle
from statekit_sqlite_storage.storage import PATH_SETTING


class SQLiteStorageTestSupport(StorageTestSupport):
    def fresh_location(self, work: Path) -> StorageLocation:
        return StorageLocation(options={"path": str(work / "checkpoints.db")})

    def unwritable_location(self, work: Path) -> tuple[StorageLocation, str] | None:
        blocker = work / "not-a-directory"
        blocker.write_bytes(b"a file where a directory is expected")
        return StorageLocation(options={"path": str(blocker / "checkpoints.db")}), PATH_SETTING

    def corrupt(self, storage: CheckpointStorage, job_id: str, handle: StreamStateHandle,
                offset: int | None = None) -> str | None:
        def flip(data: bytes) -> bytes:
            changed = bytearray(data)
            changed[len(data) // 2 if offset is None else offset] ^= 0xFF
            return bytes(changed)
        return self._change(storage, handle, flip)

    def truncate(self, storage: CheckpointStorage, job_id: str, handle: StreamStateHandle) -> str | None:
        return self._change(storage, handle, lambda data: data[: len(data) // 2])

    def delete(self, storage: CheckpointStorage, job_id: str, handle: StreamStateHandle) -> str | None:
        return self._change(storage, handle, None)

    @staticmethod
    def _change(storage: CheckpointStorage, handle: StreamStateHandle,
                change: Callable[[bytes], bytes] | None) -> str | None:
        """Rewrite (or, with None, delete) the row holding ``handle``; its stream id, which the
        storage's errors name."""
        if not isinstance(handle, SQLiteStreamHandle):
            return None
        sqlite_storage: Any = storage
        database = sqlite_storage.database()
        if change is None:
            database.execute("DELETE FROM streams WHERE id = ?", (handle.stream_id,))
        else:
            data = bytes(database.one("SELECT data FROM streams WHERE id = ?", (handle.stream_id,)))
            database.execute("UPDATE streams SET data = ? WHERE id = ?", (change(data), handle.stream_id))
        return handle.stream_id
