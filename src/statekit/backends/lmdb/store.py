"""One LMDB environment as a store of ``KVTable`` s (one named database per state).

``LMDBStore`` owns the environment, the exclusive ``statekit.lock`` file, the long-lived write
transaction with its replay log, the growth of the memory map, and the read snapshots (MVCC read
transactions) that pending snapshots and large iterations read from. See ``backend.py`` for the
design; the invariants are:

* every write goes through the one open write transaction (begun lazily by the first access,
  committed by a snapshot, a large iteration, the creation of a table, or once the writes reach
  ``write-batch-size``) and is appended to its table's ``log`` before it is tried; a ``put`` waits
  in its table's ``pending`` dict until the table flushes it (``LMDBTable``), at the latest when
  the transaction is committed;
* ``MapFullError`` poisons an LMDB write transaction (every later call fails with
  ``BadTxnError`` and its writes are lost), so ``recover_from_full`` aborts it, doubles the map,
  and replays the tables' logs into a new one: nothing written since the last commit is lost
  (tables are independent databases: each log is replayed in its own order);
* ``env.set_mapsize`` invalidates every transaction of the environment, so before growing, each
  live ``ReadSnapshot`` is *spilled*: its point in time is copied (``mdb_env_copy`` of its read
  transaction) into a private environment that it reads from instead. Reads of a snapshot happen in
  chunks under the snapshot's lock, so a spill never pulls a cursor from under another thread.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import lmdb

from statekit.backends.common.local_dirs import acquire_lock, release_lock, working_state_error
from statekit.backends.lmdb.cursors import database_names
from statekit.backends.lmdb.options import SETTING_PREFIX, LMDBOptions
from statekit.backends.lmdb.read_snapshot import DATA_FILE, ReadSnapshot
from statekit.backends.lmdb.table import LMDBTable
from statekit.spi.errors import RestoreError, SnapshotError, StateAccessError, StatekitError, WorkingStateError

ENV_DIR = "env"

#: native objects a forked child inherited and must never deallocate (see ``LMDBStore.close``)
_INHERITED: list[Any] = []
#: the stores open in this process, for ``_disown_in_child``
_OPEN_STORES: "weakref.WeakSet[LMDBStore]" = weakref.WeakSet()


def _disown_in_child() -> None:
    """Run in a forked child: every store open at the fork gives up its parent's transactions."""
    for store in list(_OPEN_STORES):
        store.disown_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_in_child)


class LMDBStore:
    """An LMDB environment in ``directory/env``, locked by ``directory/statekit.lock``."""

    def __init__(self, directory: str, options: LMDBOptions) -> None:
        self.directory = directory
        self.options = options
        self.env: Any = None
        self.txn: Any = None  # the open write transaction, or None
        self.budget = options.write_batch_size  # bytes ``txn`` may still take before it is committed
        self.growths = 0  # map growths
        self.recoveries = 0  # growths forced by MapFullError (a poisoned transaction's log replayed)
        self.spills = 0  # read snapshots copied out because the map grew under them
        self._owner = 0  # thread that began ``txn``
        self._pid = os.getpid()
        self._dbs: dict[str, Any] = {}
        self._tables: dict[str, LMDBTable] = {}
        self._snapshots: set[ReadSnapshot] = set()
        self._snapshots_lock = threading.Lock()
        #: snapshots of iterators dropped unfinished; released at the next safe point (``__del__``
        #: may run inside any allocation, even while a lock of this store is held)
        self._dropped: list[ReadSnapshot] = []
        self._closed = False
        os.makedirs(directory, exist_ok=True)
        self._lock_fd: int | None = acquire_lock(directory, "the LMDB environment")
        try:
            self.env = lmdb.open(os.path.join(directory, ENV_DIR), map_size=options.initial_map_size,
                                 max_dbs=options.max_dbs, max_readers=options.max_readers,
                                 sync=options.sync, metasync=options.metasync, writemap=options.writemap,
                                 readahead=options.readahead, lock=True, subdir=True, create=True)
        except BaseException:
            release_lock(self._lock_fd)
            self._lock_fd = None
            raise
        _OPEN_STORES.add(self)
        self.max_key_size = self.env.max_key_size()
        self.map_size = self.env.info()["map_size"]
        try:
            self._open_databases()
        except BaseException:
            self.close()
            raise

    def _open_databases(self) -> None:
        """Open every named database the environment already holds (a native checkpoint put in
        place, a working copy resumed by local recovery). A read snapshot sees only the databases
        opened in this process, so a state no function registered again would otherwise be left out
        of the next full snapshot, savepoint or changelog base, and be lost."""
        with self.env.begin() as txn:
            names = database_names(txn)
        try:
            with self.env.begin(write=True) as txn:
                dbs = {name.decode("utf-8"): self.env.open_db(name, txn=txn, create=False) for name in names}
        except lmdb.DbsFullError:
            raise RestoreError(
                f"the LMDB environment in {self.directory} holds {len(names)} named databases, more than "
                f"{SETTING_PREFIX}max-dbs = {self.options.max_dbs} allows; raise {SETTING_PREFIX}max-dbs to at "
                f"least {len(names)}") from None
        self._dbs.update(dbs)

    # --- tables
    def table(self, name: str) -> "LMDBTable":
        """The table of ``name``: its named database, created if missing."""
        db = self._dbs.get(name)
        if db is None:
            self._check_usable()
            self.commit()  # py-lmdb creates a database in its own write transaction
            encoded = name.encode("utf-8")
            if len(encoded) > self.max_key_size:
                raise StateAccessError(f"state name {name[:40]!r}... is {len(encoded)} bytes; LMDB names a "
                                       f"database with a key of at most {self.max_key_size} bytes")
            while True:
                try:
                    db = self.env.open_db(encoded, create=True)
                    break
                except lmdb.MapFullError:
                    self._grow()
                except lmdb.DbsFullError:
                    raise StateAccessError(
                        f"cannot create the database of state {name!r}: this LMDB environment holds at most "
                        f"{self.options.max_dbs} states; raise {SETTING_PREFIX}max-dbs") from None
            self._dbs[name] = db
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = LMDBTable(self, name, db)
        return table

    def _end_txn(self) -> Any:
        """Forget the write transaction (and the tables' cursors of it); return it."""
        txn, self.txn = self.txn, None
        for table in self._tables.values():
            table.drop_cursor()
        return txn

    def table_stats(self) -> dict[str, dict[str, int]]:
        """LMDB's ``stat`` of each named database as of now, the open write transaction's writes
        (and what the tables hold back) included."""
        self._check_usable()
        for table in self._tables.values():
            table.flush()  # into the write transaction, begun if none is open
        if self.txn is not None:
            return {name: self.txn.stat(db) for name, db in self._dbs.items()}
        with self.env.begin() as txn:
            return {name: txn.stat(db) for name, db in self._dbs.items()}

    # --- the write transaction
    def begin(self) -> Any:
        self._check_usable()
        self.txn = self.env.begin(write=True)
        self._owner = threading.get_ident()
        return self.txn

    @staticmethod
    def exists(directory: str) -> bool:
        """Whether ``directory`` holds an environment (an earlier store's)."""
        return os.path.exists(os.path.join(directory, ENV_DIR, DATA_FILE))

    def sync(self) -> None:
        """Flush what was committed to disk (commits do not, with the default ``sync=false``)."""
        self._check_usable()
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise self._disk_error(exc, "sync its environment") from exc

    def commit(self) -> None:
        """Commit the write transaction (if one is open); the writes are then durable in the map."""
        self._release_dropped()
        if self.txn is not None:
            self._check_owner("commit")  # before the flushes write into it
        for table in self._tables.values():
            table.flush()
        while self.txn is not None:
            self._check_owner("commit")
            txn = self._end_txn()
            try:
                txn.commit()
            except lmdb.MapFullError:  # the commit's free-list pages did not fit; the txn is gone
                self.recover_from_full()
                continue
            except lmdb.Error as exc:  # the txn is gone, and its writes with it
                raise self._disk_error(exc, "commit its write transaction") from exc
            self._clear_logs()
            self._grow_ahead()

    def _clear_logs(self) -> None:
        """The write transaction ended: nothing is left to replay, the write budget is whole again."""
        for table in self._tables.values():
            table.forget_writes()
        self.budget = self.options.write_batch_size

    def recover_from_full(self) -> None:
        """After ``MapFullError``: abort the poisoned transaction, double the map, replay the
        tables' logs (which hold the write that failed) into a new transaction."""
        if self.txn is not None:
            self._check_owner("abort")
            self._end_txn().abort()
        self.recoveries += 1
        while True:
            self._grow()
            txn = self.begin()
            try:
                self._replay(txn)
                return
            except lmdb.MapFullError:
                self._end_txn().abort()

    def _replay(self, txn: Any) -> None:
        for table in self._tables.values():  # independent databases: each in its own order
            table.replay(txn)

    def _disk_error(self, exc: lmdb.Error, action: str) -> StatekitError:
        """``exc`` of a write to the environment's files as a statekit error naming the directory
        and the setting to change: the map size, or the local directory of a full or failing disk."""
        if isinstance(exc, lmdb.MapFullError):
            return WorkingStateError(
                f"the LMDB environment in {self.directory} cannot {action}: its map of {self.map_size} bytes is "
                f"full and could not grow ({exc}); raise {SETTING_PREFIX}map-size")
        return working_state_error(exc, "lmdb", self.directory, action) or WorkingStateError(
            f"the LMDB environment in {self.directory} cannot {action}: {type(exc).__name__}: {exc}")

    # --- map growth
    def _grow(self, factor: int = 2) -> None:
        """Multiply the map size; live read snapshots are spilled first (``set_mapsize`` ends every
        transaction of the environment). No write transaction may be open."""
        self._release_dropped()
        with self._snapshots_lock:
            live = list(self._snapshots)
        for snapshot in live:
            snapshot.spill()
        try:
            self.env.set_mapsize(self.map_size * factor)
        except lmdb.Error as exc:
            raise self._disk_error(exc, f"grow its map to {self.map_size * factor} bytes") from exc
        self.map_size = self.env.info()["map_size"]
        self.growths += 1

    def _grow_ahead(self) -> None:
        """Grow while nothing must be spilled, once committed pages pass half the map."""
        if self._snapshots:
            return
        info = self.env.info()
        used = (info["last_pgno"] + 1) * self.page_size()
        if used * 2 > self.map_size:
            self._grow()

    def page_size(self) -> int:
        """The environment's page size in bytes."""
        size = getattr(self, "_psize", None)
        if size is None:
            size = self._psize = self.env.stat()["psize"]
        return size

    # --- read snapshots
    def open_snapshot(self) -> "ReadSnapshot":
        """Commit, and begin a read transaction on what was committed (MVCC: later writes do not
        reach it). It may be read from another thread."""
        self.commit()
        self._check_usable()
        try:
            txn = self.env.begin(write=False)
        except lmdb.ReadersFullError:
            raise SnapshotError(f"too many open LMDB read transactions (pending snapshots and iterations); "
                                f"raise {SETTING_PREFIX}max-readers (now {self.options.max_readers})") from None
        snapshot = ReadSnapshot(self, txn, dict(self._dbs))
        with self._snapshots_lock:
            self._snapshots.add(snapshot)
        return snapshot

    def _release_dropped(self) -> None:
        while self._dropped:
            self._dropped.pop().release()

    def _forget(self, snapshot: "ReadSnapshot") -> None:
        with self._snapshots_lock:
            self._snapshots.discard(snapshot)

    # --- lifecycle
    def _check_usable(self) -> None:
        if self._closed:
            raise StatekitError(f"the LMDB environment in {self.directory} is closed (its backend was disposed)")
        if os.getpid() != self._pid:
            raise StatekitError(
                f"the LMDB environment in {self.directory} was opened in process {self._pid} and cannot be used "
                f"in process {os.getpid()} (a fork): create the backend inside the worker that uses it")

    def _check_owner(self, action: str) -> None:
        me = threading.get_ident()
        if self._owner != me:
            raise StatekitError(
                f"cannot {action} the LMDB write transaction on thread {me}: it was begun on thread "
                f"{self._owner}; a keyed backend must be used from one thread (only a pending snapshot's "
                f"write() may run on another)")
        if os.getpid() != self._pid:
            self._check_usable()

    def disown_after_fork(self) -> None:
        """In a forked child, the write transaction open at the fork, its cursors, the pending puts
        and the read snapshots are the parent's: forget them (never deallocating the native objects),
        so that the next access begins a transaction of its own and is refused by ``_check_usable``
        (reads through the inherited cursors would otherwise go on working, and writes vanish at the
        refused commit), and a snapshot refuses to be read (``ReadSnapshot.forget_after_fork``)."""
        cursors = [table._cursor for table in self._tables.values()]
        _INHERITED.append((self._end_txn(), cursors))
        for table in self._tables.values():
            table.forget_writes()
        _INHERITED.extend(snapshot.forget_after_fork() for snapshot in (*self._snapshots, *self._dropped))
        self._snapshots.clear()
        self._dropped.clear()
        self._snapshots_lock = threading.Lock()  # another thread of the parent may have held it at the fork

    def close(self) -> None:
        """Abort the write transaction, end every snapshot, close the environment, release the lock.
        In a forked child only the child's references are dropped: the parent still owns it all."""
        if self._closed:
            return
        self._closed = True
        _OPEN_STORES.discard(self)
        if os.getpid() != self._pid:
            # keep the inherited native objects alive: deallocating them here could close the
            # parent's environment from the child
            _INHERITED.append((self.env, self.txn, list(self._tables.values()), list(self._snapshots)))
            self.env = self.txn = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # no LOCK_UN: that would release the parent's lock too
                self._lock_fd = None
            return
        try:
            self._dropped.clear()
            with self._snapshots_lock:
                live = list(self._snapshots)
                self._snapshots.clear()
            for snapshot in live:
                snapshot.close()
            txn = self._end_txn()
            self._clear_logs()
            if txn is not None:
                txn.abort()  # the state is discarded with the directory
            if self.env is not None:
                self.env.close()
                self.env = None
            self._dbs.clear()
            self._tables.clear()
        finally:
            if self._lock_fd is not None:
                release_lock(self._lock_fd)
                self._lock_fd = None
