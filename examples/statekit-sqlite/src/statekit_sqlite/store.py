"""One SQLite database file as the ordered key-value store that ``KVKeyedStateBackend`` needs.

Every state lives in one table, ``kv(state, key, value)``, whose primary key ``(state, key)``
orders keys bytewise (SQLite compares BLOBs with ``memcmp``), so the range scans of the key
layout (one key group, one key, one map) are index range scans. Keys and values are opaque
bytes here: the shared KV layer lays them out.

Writes. One connection, the *writer*, is always inside a transaction: a commit per write would
cost far more than the state access itself. It is committed when a snapshot is taken (and when a
long range scan continues from a view, see ``SQLiteTable.items``).

Snapshot isolation. The database runs in WAL mode, where a read transaction keeps reading the
database as of its start while a writer goes on committing. A ``SQLiteView`` is such a read
transaction on a connection of its own: the writer commits, the view begins, and nothing written
afterwards can reach it. It may be read on another thread (the asynchronous snapshot part).
Taking one costs a commit and opening a connection, whatever the size of the state; copying the
database at snapshot time (``Connection.backup``) was the alternative, at a cost proportional to
the state, in the synchronous part.
"""
from __future__ import annotations

import sqlite3
import weakref
from typing import Any, Iterable, Iterator

from statekit.backends.common import KVTable, KVView
from statekit.spi.errors import StatekitError

SCHEMA = ("CREATE TABLE IF NOT EXISTS kv (state TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, "
          "PRIMARY KEY (state, key)) WITHOUT ROWID")
GET = "SELECT value FROM kv WHERE state = ? AND key = ?"
PUT = "INSERT OR REPLACE INTO kv (state, key, value) VALUES (?, ?, ?)"
DELETE = "DELETE FROM kv WHERE state = ? AND key = ?"
DELETE_RANGE = "DELETE FROM kv WHERE state = ? AND key >= ? AND key < ?"
RANGE = "SELECT key, value FROM kv WHERE state = ? AND key >= ? AND key < ? ORDER BY key"
RANGE_PAGE = RANGE + " LIMIT ?"
#: ``SQLiteTable.items`` reads up to this many entries at once; a longer range continues from a view
PAGE = 1024


class SQLiteStore:
    """The database file at ``path``: its writer connection, and the views taken of it."""

    def __init__(self, path: str, cache_size: int, synchronous: str) -> None:
        self.path = path
        self._views: weakref.WeakSet[SQLiteView] = weakref.WeakSet()
        self.writer = _connect(path)
        self.writer.execute("PRAGMA journal_mode = WAL")
        self.writer.execute(f"PRAGMA synchronous = {synchronous}")  # off, normal or full (checked by the option)
        self.writer.execute(f"PRAGMA cache_size = -{max(cache_size // 1024, 1)}")  # negative: KiB
        self.writer.execute(SCHEMA)
        self.writer.execute("BEGIN")

    def commit(self) -> None:
        self.writer.execute("COMMIT")
        self.writer.execute("BEGIN")

    def open_view(self) -> "SQLiteView":
        """Commit, then begin a read transaction that sees exactly what was committed."""
        self.commit()
        connection = _connect(self.path)
        connection.execute("BEGIN")
        connection.execute("SELECT 1 FROM kv LIMIT 1").fetchall()  # the read transaction starts at its first read
        view = SQLiteView(connection)
        self._views.add(view)
        return view

    def close(self) -> None:
        """End every view and roll back the open transaction (the state is discarded with the file)."""
        for view in list(self._views):
            view.release()
        self.writer.close()


class SQLiteTable(KVTable):
    """The rows of one state, read and written through the store's writer connection."""

    def __init__(self, store: SQLiteStore, name: str) -> None:
        self._store = store
        self._db = store.writer
        self._name = name

    def close(self) -> None:
        """The backend was disposed: state objects (held by user functions) may outlive it, and
        every later use of this table is a clear error, not one of a closed connection."""
        self._db = _CLOSED

    def get(self, key: bytes) -> bytes | None:
        row = self._db.execute(GET, (self._name, key)).fetchone()
        return None if row is None else row[0]

    def put(self, key: bytes, value: bytes) -> None:
        self._db.execute(PUT, (self._name, key, value))

    def put_many(self, entries: Iterable[tuple[bytes, bytes]]) -> None:
        self._db.executemany(PUT, ((self._name, key, value) for key, value in entries))

    def delete(self, key: bytes) -> None:
        self._db.execute(DELETE, (self._name, key))

    def delete_range(self, lower: bytes, upper: bytes) -> None:
        self._db.execute(DELETE_RANGE, (self._name, lower, upper))

    def first(self, lower: bytes, upper: bytes) -> tuple[bytes, bytes] | None:
        """One row read, where ``items`` reads a page (and opens a view for a longer range)."""
        rows = self._db.execute(RANGE_PAGE, (self._name, lower, upper, 1)).fetchall()
        return rows[0] if rows else None

    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The range as of this call, though the caller may write while iterating: up to ``PAGE``
        entries are read into a list (a map of one key, typically); a longer range (all keys of a
        state) continues from a view, so memory stays bounded and later writes cannot reach it."""
        first = self._db.execute(RANGE_PAGE, (self._name, lower, upper, PAGE)).fetchall()
        if len(first) < PAGE:
            return iter(first)
        # nothing was written since ``first`` was read: the view continues it exactly
        return _continued(first, self._store.open_view(), self._name, first[-1][0] + b"\x00", upper)


class _ClosedConnection:
    """Stands in for the writer connection of a disposed backend's tables."""

    def __getattr__(self, name: str) -> Any:
        raise StatekitError("keyed state was used after its sqlite backend was disposed")


_CLOSED: Any = _ClosedConnection()


class SQLiteView(KVView):
    """A read transaction on its own connection: the database as of ``SQLiteStore.open_view``."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection

    def items(self, table: str, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._db.execute(RANGE, (table, lower, upper)))

    def release(self) -> None:
        self._db.close()  # ends the read transaction; closing twice is harmless


def _connect(path: str) -> sqlite3.Connection:
    # autocommit mode (transactions are explicit); a view may be read on the snapshot's thread
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def _continued(first: list[tuple[bytes, bytes]], view: SQLiteView, table: str, lower: bytes,
               upper: bytes) -> Iterator[tuple[bytes, bytes]]:
    try:
        yield from first
        yield from view.items(table, lower, upper)
    finally:
        view.release()
