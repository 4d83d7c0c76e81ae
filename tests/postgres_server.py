"""A real PostgreSQL server for the tests, on 127.0.0.1, from the ``pgserver`` wheel (PostgreSQL's
binaries packaged for pip; it also runs them as an unprivileged user when the tests run as root).

pgserver starts its servers on a Unix socket only and with PostgreSQL's defaults; the sinks need
prepared transactions (``max_prepared_transactions``, 0 by default) and the tests want TCP, so the
server pgserver initialized is restarted here with those settings.
"""
from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


@dataclass
class PostgresServer:
    pgdata: Path
    port: int
    user: str | None

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def stop(self) -> None:
        from pgserver._commands import pg_ctl
        pg_ctl(["-w", "stop", "-m", "fast"], pgdata=self.pgdata, user=self.user)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_postgres(directory: Path, max_prepared_transactions: int = 64) -> PostgresServer:
    import pgserver
    from pgserver._commands import pg_ctl
    pgdata = directory / "pgdata"
    initialized = pgserver.get_server(pgdata, cleanup_mode=None)  # initdb, and a first start on a socket
    user = initialized.system_user
    pg_ctl(["-w", "stop", "-m", "fast"], pgdata=pgdata, user=user)
    port = _free_port()
    pg_ctl(["-w", "-o", f"-h 127.0.0.1 -p {port} -k {pgdata} -c max_prepared_transactions={max_prepared_transactions}",
            "-l", str(pgdata / "log"), "start"], pgdata=pgdata, user=user)
    return PostgresServer(pgdata, port, user)


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A server in a directory of its own (outside pytest's, whose permissions the server's user
    could lose), stopped and removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="statekit-postgres-"))
    try:
        server = start_postgres(directory)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
