"""The ``sqlite`` state backend: keyed state in a SQLite database on executor-local disk.

Everything but the store comes from the shared KV layer (``statekit.backends.common``):
``KVKeyedStateBackend`` provides the five state kinds over ``SQLiteTable``, full snapshots in the
canonical format read from a ``SQLiteView``, changelog incremental snapshots, and restore (with
rescaling) from any backend's canonical snapshots and changelog chains. Operator state is the
shared ``DefaultOperatorStateBackend``.

Lifecycle. Each keyed backend has its own instance directory
(``<local-dir>/<job>/<operator>/<subtask>-<id>/``, holding ``state.db`` and its WAL files) and
holds the directory's ``statekit.lock`` while open: SQLite would let another process open the same
database, but a subtask's working state belongs to one worker process. The backend is created
inside the worker that uses it, never before a fork. ``dispose()`` closes the database, releases
the lock and removes the directory.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from statekit.backends.common import (
    DefaultOperatorStateBackend, KVKeyedStateBackend, acquire_lock, instance_path, release_lock,
)
from statekit.spi import (
    Capabilities, KeyedBackendParams, OperatorBackendParams, OperatorStateBackend, StateBackend, StatekitError,
)
from statekit_sqlite.options import SQLiteOptions
from statekit_sqlite.store import SQLiteStore, SQLiteTable, SQLiteView

DATABASE_FILE = "state.db"


class SQLiteStateBackend(StateBackend):
    """The factory ``spark.statekit.backend=sqlite`` selects: configuration only, picklable."""

    name = "sqlite"
    local_dir_option = "local-dir"
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=True, out_of_core=True)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sqlite_options = SQLiteOptions.parse(options)

    def create_keyed_backend(self, params: KeyedBackendParams) -> "SQLiteKeyedStateBackend":
        return SQLiteKeyedStateBackend(params, self.sqlite_options, supports_ttl=self.capabilities.ttl)

    def create_operator_backend(self, params: OperatorBackendParams) -> OperatorStateBackend:
        return DefaultOperatorStateBackend(params)


class SQLiteKeyedStateBackend(KVKeyedStateBackend):
    backend_name = "sqlite"

    def __init__(self, params: KeyedBackendParams, options: SQLiteOptions = SQLiteOptions(),
                 supports_ttl: bool = True) -> None:
        super().__init__(params, options.changelog, supports_ttl)
        self._pid = os.getpid()
        self._tables: dict[str, SQLiteTable] = {}
        self.instance_dir = instance_path(params.local_dir or options.local_dir, self.backend_name,
                                          params.subtask, uuid.uuid4().hex)
        os.makedirs(self.instance_dir)
        self._lock: int | None = acquire_lock(self.instance_dir, "the SQLite database")
        self._store: SQLiteStore | None = None
        try:
            self._store = SQLiteStore(os.path.join(self.instance_dir, DATABASE_FILE), options.cache_size,
                                      options.synchronous)
            if params.restore_handles:  # canonical snapshots and changelog chains; others are rejected
                self.restore_canonical(params.restore_handles, params.restore_streams)
        except BaseException:
            self.dispose()
            raise

    # --- the store, as KVKeyedStateBackend asks for it
    def _table(self, name: str) -> SQLiteTable:
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = SQLiteTable(self._open_store(), name)
        return table

    def _view(self) -> SQLiteView:
        return self._open_store().open_view()

    def _open_store(self) -> SQLiteStore:
        if self._store is None:
            raise StatekitError("the sqlite backend was disposed")
        return self._store

    # --- lifecycle
    def dispose(self) -> None:
        if os.getpid() != self._pid:
            return  # a forked child: the database, the lock and the files are the parent's
        for table in self._tables.values():
            table.close()
        self._tables.clear()
        store, self._store = self._store, None
        lock, self._lock = self._lock, None
        try:
            if store is not None:
                store.close()
        finally:
            if lock is not None:
                release_lock(lock)
            shutil.rmtree(self.instance_dir, ignore_errors=True)
