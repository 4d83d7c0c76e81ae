"""``SqliteWriteAheadSink``: exactly-once rows in an SQLite table, through a write-ahead log.

SQLite has no transactions that span processes, so the subtasks cannot write into it themselves
and leave the commit to the driver. They log their output in checkpoint storage instead, as part
of the epoch's snapshot; once the checkpoint is complete the driver publishes each subtask's log
in one local transaction that also records ``(job, operator, epoch, subtask)`` in a bookkeeping
table, and skips a log already recorded there. A crash at any point therefore publishes every
epoch's rows exactly once (Flink's ``GenericWriteAheadSink`` with its ``CheckpointCommitter``).
"""
from __future__ import annotations

import os
import sqlite3
from typing import Any, Iterable, Sequence

import pyarrow as pa

from statekit.spi.errors import ConfigurationError, SinkError
from statekit.spi.sinks import SinkContext, WriteAheadSink

PUBLISHED_TABLE = "statekit_published"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteWriteAheadSink(WriteAheadSink):
    """``database``: the SQLite file; ``table``: an existing table with a column for each output
    column (or ``columns``, the table's names for them in output order)."""

    def __init__(self, database: str, table: str, columns: Sequence[str] | None = None,
                 busy_timeout_s: float = 60.0) -> None:
        self.database, self.table = database, table
        self.columns = tuple(columns) if columns is not None else None
        self.busy_timeout_s = busy_timeout_s
        _check_database(database)  # on the driver, which publishes

    def describe(self) -> str:
        return f"SQLite table {self.table} in {self.database}"

    def _connect(self) -> sqlite3.Connection:
        try:
            return sqlite3.connect(self.database, timeout=self.busy_timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._failure("cannot open the database", exc) from exc

    def _failure(self, what: str, exc: sqlite3.Error) -> SinkError:
        return SinkError(f"{self.describe()}: {what} ({type(exc).__name__}: {exc}): check that {self.database} is an "
                         f"SQLite database this process may write, in a writable directory (SQLite writes its journal "
                         f"beside it) on a file system with space")

    def _check_columns(self, connection: sqlite3.Connection, columns: Sequence[str]) -> None:
        """Refuse a table that lacks a column the rows go to (SQLite matches names regardless of case)."""
        existing = {row[1].lower() for row in connection.execute(f"PRAGMA table_info({_quoted(self.table)})")}
        missing = [c for c in columns if c.lower() not in existing]
        if missing:
            raise SinkError(f"{self.describe()} has no column {', '.join(map(repr, missing))} for the output: the rows "
                            f"go to columns {list(columns)} and the table has {sorted(existing)}. Add the column "
                            f"(ALTER TABLE {_quoted(self.table)} ADD COLUMN ...), or pass columns=[...] naming the "
                            f"table's columns in output order")

    def prepare_target(self, job_id: str, operator_id: str) -> None:
        try:
            self._prepare_target()
        except sqlite3.Error as exc:
            raise self._failure("cannot prepare the table", exc) from exc

    def _prepare_target(self) -> None:
        with self._connect() as connection:
            connection.execute(f"CREATE TABLE IF NOT EXISTS {PUBLISHED_TABLE} (job_id TEXT NOT NULL, operator_id TEXT "
                               f"NOT NULL, epoch INTEGER NOT NULL, subtask INTEGER NOT NULL, rows INTEGER NOT NULL, "
                               f"published_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, "
                               f"PRIMARY KEY (job_id, operator_id, epoch, subtask))")
            if connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE",
                                   (self.table,)).fetchone() is None:
                raise SinkError(f"{self.describe()} does not exist: create it with a column for each output column "
                                f"before the job starts")
            if self.columns is not None:
                self._check_columns(connection, self.columns)

    def publish(self, context: SinkContext, batches: Iterable[pa.RecordBatch]) -> None:
        connection = self._connect()
        try:
            connection.execute("BEGIN IMMEDIATE")  # one writer: the check and the insert see the same table
            if connection.execute(f"SELECT 1 FROM {PUBLISHED_TABLE} WHERE job_id = ? AND operator_id = ? AND "
                                  f"epoch = ? AND subtask = ?", context.publication_key).fetchone() is not None:
                connection.execute("ROLLBACK")
                return
            rows = 0
            for i, batch in enumerate(batches):
                columns = self.columns or tuple(batch.schema.names)
                if i == 0:
                    self._check_columns(connection, columns)
                statement = (f"INSERT INTO {_quoted(self.table)} ({', '.join(map(_quoted, columns))}) "
                             f"VALUES ({', '.join('?' * len(columns))})")
                connection.executemany(statement, zip(*(c.to_pylist() for c in batch.columns)))
                rows += batch.num_rows
            connection.execute(f"INSERT INTO {PUBLISHED_TABLE} (job_id, operator_id, epoch, subtask, rows) "
                               f"VALUES (?, ?, ?, ?, ?)", (*context.publication_key, rows))
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        finally:
            connection.close()

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)

    def __repr__(self) -> str:
        return f"SqliteWriteAheadSink({self.database!r}, {self.table!r})"


def _check_database(database: str) -> None:
    """Refuse a database in a directory that does not exist, or that this process may not write."""
    if database in ("", ":memory:"):
        return
    path = os.path.abspath(database)
    directory = os.path.dirname(path)
    setting = f"SqliteWriteAheadSink(database={database!r})"
    if os.path.isdir(path):
        raise ConfigurationError(f"{setting} is a directory: name the database file in it")
    if not os.path.isdir(directory):
        raise ConfigurationError(f"{setting}: the directory {directory} does not exist (or is not a directory): "
                                 f"create it, and the table in the database, before the job starts")
    for target in (path, directory) if os.path.exists(path) else (directory,):
        if not os.access(target, os.W_OK):
            raise ConfigurationError(f"{setting}: {target} is read-only for this process (its permissions, or a "
                                     f"read-only file system); SQLite writes the database and a journal beside it "
                                     f"in {directory}: make both writable, or choose a database elsewhere")


def published(database: str, job_id: str) -> list[tuple[Any, ...]]:
    """What was published for ``job_id``: (operator, epoch, subtask, rows), in order."""
    with sqlite3.connect(database) as connection:
        return connection.execute(f"SELECT operator_id, epoch, subtask, rows FROM {PUBLISHED_TABLE} WHERE job_id = ? "
                                  f"ORDER BY operator_id, epoch, subtask", (job_id,)).fetchall()
