"""The database file: one connection per thread (a snapshot's upload runs in a thread of its own),
opened on first use in each process, in WAL mode so that Spark's Python workers on one machine
write their streams concurrently while the driver reads.

Schema::

    streams(id, job, checkpoint, shared, data)   one row per stream above the memory threshold
    checkpoints(job, checkpoint, metadata)        a row here = the checkpoint is complete
    owners(job, record)                           the job's owner record (fencing)
"""
from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any, Iterable

from statekit.spi.errors import ConfigurationError

SCHEMA = """
CREATE TABLE IF NOT EXISTS streams (
    id TEXT PRIMARY KEY, job TEXT NOT NULL, checkpoint INTEGER NOT NULL, shared INTEGER NOT NULL,
    data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS streams_of_checkpoint ON streams (job, checkpoint, shared);
CREATE TABLE IF NOT EXISTS checkpoints (
    job TEXT NOT NULL, checkpoint INTEGER NOT NULL, metadata BLOB NOT NULL, PRIMARY KEY (job, checkpoint));
CREATE TABLE IF NOT EXISTS owners (job TEXT PRIMARY KEY, record BLOB NOT NULL);
"""


class Database:
    """``path``: the database file; ``setting``: where it came from (named in errors)."""

    def __init__(self, path: str, busy_timeout: float, setting: str) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.setting = setting
        self._local = threading.local()

    def create(self) -> None:
        """Create the file and its tables if needed, or fail naming the setting."""
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(directory, exist_ok=True)
            self.connection()
        except (OSError, sqlite3.Error) as exc:
            raise ConfigurationError(f"{self.setting}={self.path!r} cannot hold the checkpoint database "
                                     f"({type(exc).__name__}: {exc}); choose a file path this process may "
                                     f"write, in a directory that exists or can be created") from exc

    def connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.executescript(SCHEMA)
            self._local.connection = connection
        return connection

    def execute(self, sql: str, parameters: Iterable[Any] = ()) -> sqlite3.Cursor:
        return self.connection().execute(sql, tuple(parameters))

    def one(self, sql: str, parameters: Iterable[Any] = ()) -> Any:
        """The first column of the first row, or None."""
        row = self.execute(sql, parameters).fetchone()
        return None if row is None else row[0]

    def describe(self, error: BaseException) -> str:
        return f"{type(error).__name__}: {error}; the database is {self.path} ({self.setting})"
