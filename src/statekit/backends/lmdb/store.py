"""One LMDB environment as a store of ``KVTable`` s (one named database per state).

``LMDBStore`` owns the environment, the exclusive ``statekit.lock`` file, the long-lived write
transaction with its replay log, the growth of the memory map, and the read snapshots (MVCC read
transactions) that pending snapshots and large iterations read from. See ``backend.py`` for the
design; the invariants are:

* every write goes through the one open write transaction (begun lazily by the first access,
  committed by a snapshot, a large iteration, the creation of a table, or once the writes reach
  ``write-batch-size``) and is appended to ``log`` before it is tried;
* ``MapFullError`` poisons an LMDB write transaction (every later call fails with
  ``BadTxnError`` and its writes are lost), so ``recover_from_full`` aborts it, doubles the map,
  and replays ``log`` into a new one: nothing written since the last commit is lost;
* ``env.set_mapsize`` invalidates every transaction of the environment, so before growing, each
  live ``ReadSnapshot`` is *spilled*: its point in time is copied (``mdb_env_copy`` of its read
  transaction) into a private environment that it reads from instead. Reads of a snapshot happen in
  chunks under the snapshot's lock, so a spill never pulls a cursor from under another thread.
"""
from __future__ import annotations

import os
import shutil
import threading
import uuid
from typing import Any, Iterator

import lmdb

from statekit.backends.common.kv_store import KVTable, KVView
from statekit.backends.common.local_dirs import acquire_lock, release_lock
from statekit.backends.lmdb.options import SETTING_PREFIX, LMDBOptions
from statekit.spi.errors import SnapshotError, StateAccessError, StatekitError

ENV_DIR = "env"
#: ``items`` of a table reads up to this many entries into memory; a larger range is read from a
#: read snapshot instead (``keys()`` over a whole table, very large maps)
MATERIALIZE_LIMIT = 1024
#: entries read per lock acquisition from a read snapshot
CHUNK = 1024
#: bytes a logged write counts for besides its value (the key, the tuple, the list slot)
_ENTRY_OVERHEAD = 96


#: native objects a forked child inherited and must never deallocate (see ``LMDBStore.close``)
_INHERITED: list[Any] = []


class _RangeEnd:
    """Marks a logged ``delete_range``: ``(db, lower, _RangeEnd(upper))``."""

    __slots__ = ("upper",)

    def __init__(self, upper: bytes) -> None:
        self.upper = upper


def _seek(cursor: Any, lower: bytes, max_key: int) -> bool:
    """Position ``cursor`` at the first key ``>= lower`` (or at a smaller key that the caller skips
    when ``lower`` is longer than LMDB keys may be: no stored key equals it)."""
    if not lower:
        return cursor.first()
    return cursor.set_range(lower if len(lower) <= max_key else lower[:max_key])


def read_range(cursor: Any, lower: bytes, upper: bytes, limit: int, max_key: int) -> list[tuple[bytes, bytes]]:
    """Up to ``limit`` entries with ``lower <= key < upper``, in key order."""
    out: list[tuple[bytes, bytes]] = []
    if not _seek(cursor, lower, max_key):
        return out
    append = out.append
    long_lower = len(lower) > max_key
    for key, value in cursor.iternext():
        if key >= upper:
            break
        if long_lower and key < lower:
            continue
        append((key, value))
        if len(out) >= limit:
            break
    return out


def _delete_range(txn: Any, db: Any, lower: bytes, upper: bytes, max_key: int) -> None:
    cursor = txn.cursor(db)
    try:
        if not _seek(cursor, lower, max_key):
            return
        while True:
            key = cursor.key()
            if not key or key >= upper:
                return
            if key < lower:  # only with a lower bound longer than a key can be
                if not cursor.next():
                    return
            elif not cursor.delete():  # deletes and moves to the next entry
                return
    finally:
        cursor.close()


class LMDBStore:
    """An LMDB environment in ``directory/env``, locked by ``directory/statekit.lock``."""

    def __init__(self, directory: str, options: LMDBOptions) -> None:
        self.directory = directory
        self.options = options
        self.env: Any = None
        self.txn: Any = None  # the open write transaction, or None
        self.log: list[tuple[Any, bytes, Any]] = []  # writes of ``txn``, replayed after a map growth
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
        self.max_key_size = self.env.max_key_size()
        self.map_size = self.env.info()["map_size"]

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
            table._cursor = None
        return txn

    # --- the write transaction
    def begin(self) -> Any:
        self._check_usable()
        self.txn = self.env.begin(write=True)
        self._owner = threading.get_ident()
        return self.txn

    @staticmethod
    def exists(directory: str) -> bool:
        """Whether ``directory`` holds an environment (an earlier store's)."""
        return os.path.exists(os.path.join(directory, ENV_DIR, "data.mdb"))

    def sync(self) -> None:
        """Flush what was committed to disk (commits do not, with the default ``sync=false``)."""
        self._check_usable()
        self.env.sync(True)

    def commit(self) -> None:
        """Commit the write transaction (if one is open); the writes are then durable in the map."""
        self._release_dropped()
        while self.txn is not None:
            self._check_owner("commit")
            txn = self._end_txn()
            try:
                txn.commit()
            except lmdb.MapFullError:  # the commit's free-list pages did not fit; the txn is gone
                self.recover_from_full()
                continue
            self.log = []
            self.budget = self.options.write_batch_size
            self._grow_ahead()

    def abort(self) -> None:
        txn = self._end_txn()
        self.log = []
        self.budget = self.options.write_batch_size
        if txn is not None:
            txn.abort()

    def recover_from_full(self) -> None:
        """After ``MapFullError``: abort the poisoned transaction, double the map, replay the log
        (which holds the write that failed) into a new transaction."""
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
        max_key = self.max_key_size
        for db, key, value in self.log:
            if value is None:
                txn.delete(key, b"", db)
            elif type(value) is _RangeEnd:
                _delete_range(txn, db, key, value.upper, max_key)
            else:
                txn.put(key, value, True, True, False, db)

    # --- map growth
    def _grow(self, factor: int = 2) -> None:
        """Multiply the map size; live read snapshots are spilled first (``set_mapsize`` ends every
        transaction of the environment). No write transaction may be open."""
        self._release_dropped()
        with self._snapshots_lock:
            live = list(self._snapshots)
        for snapshot in live:
            snapshot.spill()
        self.env.set_mapsize(self.map_size * factor)
        self.map_size = self.env.info()["map_size"]
        self.growths += 1

    def _grow_ahead(self) -> None:
        """Grow while nothing must be spilled, once committed pages pass half the map."""
        if self._snapshots:
            return
        info = self.env.info()
        used = (info["last_pgno"] + 1) * self._page_size()
        if used * 2 > self.map_size:
            self._grow()

    def _page_size(self) -> int:
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

    def close(self) -> None:
        """Abort the write transaction, end every snapshot, close the environment, release the lock.
        In a forked child only the child's references are dropped: the parent still owns it all."""
        if self._closed:
            return
        self._closed = True
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
            self.log = []
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


class LMDBTable(KVTable):
    """A named database, read and written through a cursor of the store's open write transaction
    (py-lmdb's ``Cursor.get``/``put`` are markedly faster than ``Transaction.get``/``put`` with a
    ``db`` argument). The cursor is dropped whenever the transaction ends."""

    def __init__(self, store: LMDBStore, name: str, db: Any) -> None:
        self._store = store
        self.name = name
        self._db = db
        self._cursor: Any = None  # a cursor of ``store.txn``, or None

    def _open_cursor(self) -> Any:
        store = self._store
        txn = store.txn
        if txn is None:
            txn = store.begin()
        cursor = self._cursor = txn.cursor(self._db)
        return cursor

    def _key_error(self, key: bytes) -> StateAccessError:
        limit = self._store.max_key_size
        return StateAccessError(
            f"state {self.name!r}: a stored key of {len(key)} bytes exceeds LMDB's maximum key size of {limit} "
            f"bytes (2-byte key group + length-prefixed key and namespace [+ map user key]); use smaller keys, "
            f"namespaces or map keys, or a key serializer that hashes long keys")

    def get(self, key: bytes) -> bytes | None:
        cursor = self._cursor
        if cursor is None:
            cursor = self._open_cursor()
        return cursor.get(key)  # a key too long to store is simply not found

    def put(self, key: bytes, value: bytes) -> None:
        cursor = self._cursor
        if cursor is None:
            cursor = self._open_cursor()
        store = self._store
        log = store.log
        log.append((self._db, key, value))
        try:
            cursor.put(key, value)
        except lmdb.MapFullError:
            store.recover_from_full()
        except lmdb.BadValsizeError:
            log.pop()
            if len(key) > store.max_key_size:
                raise self._key_error(key) from None
            raise
        store.budget -= len(value) + _ENTRY_OVERHEAD
        if store.budget < 0:
            store.commit()

    def delete(self, key: bytes) -> None:
        store = self._store
        txn = store.txn
        if txn is None:
            txn = store.begin()
        log = store.log
        log.append((self._db, key, None))
        try:
            txn.delete(key, b"", self._db)
        except lmdb.MapFullError:  # copy-on-write of the touched pages needs room too
            store.recover_from_full()
        store.budget -= _ENTRY_OVERHEAD
        if store.budget < 0:
            store.commit()

    def delete_range(self, lower: bytes, upper: bytes) -> None:
        store = self._store
        txn = store.txn
        if txn is None:
            txn = store.begin()
        store.log.append((self._db, lower, _RangeEnd(upper)))
        try:
            _delete_range(txn, self._db, lower, upper, store.max_key_size)
        except lmdb.MapFullError:
            store.recover_from_full()
        store.budget -= _ENTRY_OVERHEAD
        if store.budget < 0:
            store.commit()

    def put_many(self, entries: Any) -> None:
        put = self.put
        for key, value in entries:
            put(key, value)

    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The range as of this call. Up to ``MATERIALIZE_LIMIT`` entries are read into a list at
        once (a map of one key, typically); a larger range continues from a read snapshot, so
        writes during the iteration cannot reach it and memory stays bounded."""
        store = self._store
        txn = store.txn
        if txn is None:
            txn = store.begin()
        cursor = txn.cursor(self._db)
        try:
            first = read_range(cursor, lower, upper, MATERIALIZE_LIMIT, store.max_key_size)
        finally:
            cursor.close()
        if len(first) < MATERIALIZE_LIMIT:
            return iter(first)
        # nothing was written since ``first`` was read: the snapshot continues it exactly
        snapshot = store.open_snapshot()
        return _SnapshotIterator(first, snapshot, self.name, first[-1][0] + b"\x00", upper)


class _SnapshotIterator:
    """Entries already read, then the rest of a range from a read snapshot; the snapshot is
    released when the iteration ends or the iterator is dropped."""

    def __init__(self, first: list[tuple[bytes, bytes]], snapshot: "ReadSnapshot", name: str,
                 lower: bytes, upper: bytes) -> None:
        self._snapshot = snapshot
        self._rest = snapshot.items(name, lower, upper)
        self._it = iter(first)

    def __iter__(self) -> "_SnapshotIterator":
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        try:
            return next(self._it)
        except StopIteration:
            pass
        if self._rest is not None:
            self._it, self._rest = self._rest, None
            try:
                return next(self._it)
            except StopIteration:
                pass
        self.close()
        raise StopIteration

    def close(self) -> None:
        if self._snapshot is not None:
            self._snapshot.release()
            self._snapshot = None  # type: ignore[assignment]

    def __del__(self) -> None:
        snapshot = self._snapshot
        if snapshot is not None:  # no locks here: the store releases it at its next safe point
            self._snapshot = None  # type: ignore[assignment]
            snapshot._store._dropped.append(snapshot)


class ReadSnapshot:
    """A read transaction of the store's environment; if the map must grow while it is alive, it
    is spilled to a private copy of its point in time. Read from any one thread at a time."""

    def __init__(self, store: LMDBStore, txn: Any, dbs: dict[str, Any]) -> None:
        self._store = store
        self._txn = txn
        self._dbs = dbs
        self._max_key = store.max_key_size
        self._lock = threading.Lock()
        self._env: Any = None  # the spilled copy, once spilled
        self._dir: str | None = None
        self._closed = False

    @property
    def spilled(self) -> bool:
        return self._env is not None

    def _read(self, name: str, lower: bytes, upper: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        with self._lock:
            if self._closed:
                raise SnapshotError("the LMDB snapshot was released (or its backend disposed) while it was read")
            db = self._dbs.get(name)
            if db is None:
                return []
            cursor = self._txn.cursor(db)
            try:
                return read_range(cursor, lower, upper, limit, self._max_key)
            finally:
                cursor.close()

    def items(self, name: str, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``lower <= key < upper`` of table ``name`` at the snapshot's point in time."""
        while True:
            chunk = self._read(name, lower, upper, CHUNK)
            yield from chunk
            if len(chunk) < CHUNK:
                return
            lower = chunk[-1][0] + b"\x00"  # the smallest key after the last one read

    def spill(self) -> None:
        """Copy this point in time into a private environment and read from it from now on."""
        with self._lock:
            if self._closed or self._env is not None:
                return
            store = self._store
            directory = os.path.join(store.directory, f"spill-{uuid.uuid4().hex[:12]}")
            os.makedirs(directory)
            try:
                store.env.copy(directory, compact=True, txn=self._txn)
                env = lmdb.open(directory, readonly=True, lock=False, max_dbs=store.options.max_dbs,
                                readahead=False, map_size=store.map_size)
                txn = env.begin()
                dbs = {}
                for name in self._dbs:
                    try:
                        dbs[name] = env.open_db(name.encode("utf-8"), txn=txn, create=False)
                    except lmdb.NotFoundError:
                        pass
            except BaseException:
                shutil.rmtree(directory, ignore_errors=True)
                raise
            self._txn.abort()
            self._txn, self._dbs, self._env, self._dir = txn, dbs, env, directory
            store.spills += 1

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            txn, self._txn = self._txn, None
            try:
                if txn is not None:
                    txn.abort()
                if self._env is not None:
                    self._env.close()
                    self._env = None
            finally:
                if self._dir is not None:
                    shutil.rmtree(self._dir, ignore_errors=True)

    def release(self) -> None:
        self.close()
        self._store._forget(self)


class LMDBView(KVView):
    """The full snapshot's consistent view: one read snapshot of every table."""

    def __init__(self, snapshot: ReadSnapshot) -> None:
        self.snapshot = snapshot

    def items(self, table: str, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.snapshot.items(table, lower, upper)

    def release(self) -> None:
        self.snapshot.release()
