"""``PostgresSink``: exactly-once rows in a PostgreSQL table through two-phase commit.

Each subtask opens a connection, copies its epoch's output into the table (``COPY``), records its
transaction id in a bookkeeping table in the same transaction, and runs ``PREPARE TRANSACTION``:
from then on the transaction survives the connection, the subtask's process and a server
restart. The driver runs ``COMMIT PREPARED`` once the checkpoint is complete, and after a failure
``COMMIT PREPARED`` again for the latest checkpoint's transactions (a transaction that is no
longer prepared but whose id is in the bookkeeping table was committed) and ``ROLLBACK PREPARED``
for every other prepared transaction of the job's operator (``pg_prepared_xacts``).

The server must allow prepared transactions: ``max_prepared_transactions`` at least the job's
parallelism (PostgreSQL's default is 0). ``idle_in_transaction_timeout`` ends a subtask's open
transaction when the subtask stalls (PostgreSQL's ``idle_in_transaction_session_timeout``); the
subtask then fails and Spark runs it again. Prepared transactions never time out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa

from statekit.spi.errors import ConfigurationError, SinkError, TransactionLostError
from statekit.spi.sinks import SinkContext, TwoPhaseCommitSink, transaction_prefix

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("PostgresSink needs psycopg 3: pip install 'statekit[postgres]'") from exc

#: the bookkeeping table: the ids of the transactions this sink committed (or prepared)
TRANSACTIONS_TABLE = "statekit_sink_transactions"
#: PostgreSQL's limit on a prepared transaction's identifier
MAX_GID_BYTES = 199
#: a password in a key/value conninfo (quoted or not) and in a URI's user part or query
_PASSWORDS = (re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|.*?)(?=\s+\w+\s*=|\s*$)", re.IGNORECASE),
              re.compile(r"(://[^:/@?#]*:)([^@/?#]*)(@)"))
_HIDDEN = "***"


def redacted_conninfo(conninfo: str) -> str:
    """``conninfo`` with its password (key/value, URI user part or query) replaced by ``***``."""
    try:
        return make_conninfo("", **{k: _HIDDEN if k == "password" else v for k, v in conninfo_to_dict(conninfo).items()})
    except psycopg.Error:  # malformed: hide what follows "password=" and a URI's "user:...@"
        return _PASSWORDS[1].sub(rf"\g<1>{_HIDDEN}\g<3>", _PASSWORDS[0].sub(rf"\g<1>{_HIDDEN}", conninfo))


def _without_password(message: str, conninfo: str) -> str:
    """A driver's message with any word of the password in ``conninfo`` hidden (libpq quotes the
    part of a malformed conninfo it stopped at, which may be the password)."""
    secrets = {m.group(2).strip("'") for m in _PASSWORDS[0].finditer(conninfo)}
    secrets |= {m.group(2) for m in _PASSWORDS[1].finditer(conninfo)}
    for secret in sorted(secrets - {""}, key=len, reverse=True):
        for word in {secret, *secret.split()}:
            message = message.replace(word, _HIDDEN)
    return message


@dataclass
class PostgresTransaction:
    context: SinkContext
    connection: psycopg.Connection
    rows: int = 0


class PostgresSink(TwoPhaseCommitSink[PostgresTransaction]):
    """``conninfo``: a libpq connection string or URI; ``table``: an existing table (optionally
    schema-qualified, ``"schema.table"``; names are matched exactly, letter case included) with a
    column for each output column, or ``columns`` naming the table's columns in output order."""

    def __init__(self, conninfo: str, table: str, columns: Sequence[str] | None = None,
                 idle_in_transaction_timeout_ms: int | None = None) -> None:
        if not table:
            raise ConfigurationError("PostgresSink needs a table name")
        try:
            conninfo_to_dict(conninfo)
        except (psycopg.Error, TypeError) as exc:  # on the driver, before any task connects with it
            raise ConfigurationError(
                f"PostgresSink(conninfo={redacted_conninfo(str(conninfo))!r}) is not a connection string libpq "
                f"takes: {_without_password(str(exc).strip(), str(conninfo))}. Pass 'host=... port=... dbname=... "
                f"user=...' (quote a value with spaces: password='a b') or a URI "
                f"postgresql://user:password@host:port/dbname") from None
        self.conninfo, self.table = conninfo, table
        self.columns = tuple(columns) if columns is not None else None
        self.idle_in_transaction_timeout_ms = idle_in_transaction_timeout_ms

    def describe(self) -> str:
        return f"PostgreSQL table {self.table}"

    def _connect(self, autocommit: bool) -> psycopg.Connection:
        conninfo = self.conninfo
        if self.idle_in_transaction_timeout_ms is not None:
            conninfo = make_conninfo(conninfo, options=f"-c idle_in_transaction_session_timeout="
                                                       f"{int(self.idle_in_transaction_timeout_ms)}")
        try:
            return psycopg.connect(conninfo, autocommit=autocommit)
        except psycopg.Error as exc:
            raise SinkError(f"{self.describe()}: cannot connect to the PostgreSQL server at "
                            f"{redacted_conninfo(self.conninfo)} ({type(exc).__name__}: "
                            f"{_without_password(' '.join(str(exc).split()), self.conninfo)}): check that the server runs and "
                            f"accepts connections there, and the host, port, dbname, user and password of the "
                            f"conninfo passed to PostgresSink") from exc

    def _table(self) -> sql.Identifier:
        return sql.Identifier(*self.table.split("."))

    def prepare_target(self, job_id: str, operator_id: str) -> None:
        with self._connect(autocommit=True) as connection:
            allowed = int(_single(connection.execute("SHOW max_prepared_transactions").fetchone()))
            if allowed == 0:
                raise SinkError("the PostgreSQL server does not allow prepared transactions "
                                "(max_prepared_transactions = 0): set max_prepared_transactions to at least the job's "
                                "parallelism in postgresql.conf and restart the server")
            connection.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (transaction_id text PRIMARY KEY, job_id text NOT NULL, "
                "operator_id text NOT NULL, epoch bigint NOT NULL, subtask integer NOT NULL, rows bigint NOT NULL, "
                "prepared_at timestamptz NOT NULL DEFAULT now())").format(sql.Identifier(TRANSACTIONS_TABLE)))
            # the name as the rows are written: quoted, so letter case counts
            exact = self._table().as_string(connection)
            if _single(connection.execute("SELECT to_regclass(%s)", (exact,)).fetchone()) is None:
                raise SinkError(f"{self.describe()} does not exist: create it with a column for each output column "
                                f"before the job starts. The name is matched exactly, letter case included (an "
                                f"unquoted CREATE TABLE {self.table} creates a table whose name is folded to lower "
                                f"case): pass the name as PostgreSQL stores it")

    # --- task side
    def begin_transaction(self, context: SinkContext) -> PostgresTransaction:
        if len(context.transaction_id.encode()) > MAX_GID_BYTES:
            raise ConfigurationError(f"the transaction id {context.transaction_id!r} is longer than PostgreSQL's "
                                     f"{MAX_GID_BYTES} bytes: shorten the job id or the operator id")
        connection = self._connect(autocommit=False)
        connection.execute("SELECT pg_current_xact_id()")  # the transaction starts now, and its timeout runs
        return PostgresTransaction(context, connection)

    def write(self, transaction: PostgresTransaction, batch: pa.RecordBatch) -> None:
        columns = self.columns or tuple(batch.schema.names)
        statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
            self._table(), sql.SQL(", ").join(sql.Identifier(c) for c in columns))
        try:
            with transaction.connection.cursor() as cursor, cursor.copy(statement) as copy:
                for row in zip(*(c.to_pylist() for c in batch.columns)):
                    copy.write_row(row)
        except psycopg.errors.UndefinedColumn as exc:
            raise SinkError(f"{self.describe()} has no column for an output column ({exc.diag.message_primary}): the "
                            f"rows of output columns {list(batch.schema.names)} go to columns {list(columns)}; add "
                            f"the missing column to the table, or pass columns=[...] naming the table's columns in "
                            f"output order") from exc
        transaction.rows += batch.num_rows

    def pre_commit(self, transaction: PostgresTransaction) -> dict[str, Any]:
        context, connection = transaction.context, transaction.connection
        connection.execute(sql.SQL("INSERT INTO {} (transaction_id, job_id, operator_id, epoch, subtask, rows) "
                                   "VALUES (%s, %s, %s, %s, %s, %s)").format(sql.Identifier(TRANSACTIONS_TABLE)),
                           (context.transaction_id, context.job_id, context.operator_id, context.epoch,
                            context.subtask, transaction.rows))
        connection.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(context.transaction_id)))
        connection.close()
        return {"id": context.transaction_id, "rows": transaction.rows}

    def abort(self, transaction: PostgresTransaction) -> None:
        transaction.connection.close()  # an open transaction ends with its connection

    # --- coordinator side
    def commit(self, record: dict[str, Any]) -> None:
        with self._connect(autocommit=True) as connection:
            try:
                connection.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(record["id"])))
            except psycopg.errors.UndefinedObject as exc:  # no longer prepared: committed, or rolled back
                committed = connection.execute(
                    sql.SQL("SELECT 1 FROM {} WHERE transaction_id = %s").format(sql.Identifier(TRANSACTIONS_TABLE)),
                    (record["id"],)).fetchone()
                if committed is None:
                    raise TransactionLostError(f"prepared transaction {record['id']} is gone from the PostgreSQL "
                                               f"server and was never committed") from exc

    def lingering(self, job_id: str, operator_id: str) -> list[dict[str, Any]]:
        prefix = transaction_prefix(job_id, operator_id)
        with self._connect(autocommit=True) as connection:
            rows = connection.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND "
                                      "left(gid, %s) = %s ORDER BY gid", (len(prefix), prefix)).fetchall()
        return [{"id": gid} for gid, in rows]

    def recover_and_abort(self, record: dict[str, Any]) -> None:
        with self._connect(autocommit=True) as connection:
            try:
                connection.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(record["id"])))
            except psycopg.errors.UndefinedObject:
                pass  # gone already

    def is_transient(self, error: BaseException) -> bool:
        cause = error.__cause__ if isinstance(error, SinkError) else error  # a failed connection is retried
        return isinstance(cause, psycopg.OperationalError) or super().is_transient(error)

    def __repr__(self) -> str:
        return f"PostgresSink(table={self.table!r})"


def _single(row: tuple[Any, ...] | None) -> Any:
    """The value of a query that returns one row of one column."""
    assert row is not None
    return row[0]
