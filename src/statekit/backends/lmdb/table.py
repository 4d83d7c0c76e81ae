"""One state's named database in the store's write transaction (``KVTable``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

import lmdb

from statekit.backends.common.kv_store import KVTable
from statekit.backends.lmdb.cursors import RangeEnd, delete_range, read_range
from statekit.backends.lmdb.read_snapshot import SnapshotIterator
from statekit.spi.errors import StateAccessError

if TYPE_CHECKING:
    from statekit.backends.lmdb.store import LMDBStore

#: ``items`` of a table reads up to this many entries into memory; a larger range is read from a
#: read snapshot instead (``keys()`` over a whole table, very large maps)
MATERIALIZE_LIMIT = 1024
#: bytes a logged write counts for besides its value (the key, the tuple, the list slot)
_ENTRY_OVERHEAD = 96


class LMDBTable(KVTable):
    """A named database, read and written through a cursor of the store's open write transaction
    (py-lmdb's ``Cursor.get``/``put`` are markedly faster than ``Transaction.get``/``put`` with a
    ``db`` argument). The cursor is dropped whenever the transaction ends (``drop_cursor``).

    While a cursor is open, ``get`` is the cursor's own method (an instance attribute, as in
    ``ColumnFamilyTable``): the per-key states call it with no Python frame between."""

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
        self.get = cursor.get  # type: ignore[method-assign]  # a key too long to store is simply not found
        return cursor

    def drop_cursor(self) -> None:
        """The write transaction ended: its cursor is gone, ``get`` opens the next one."""
        self._cursor = None
        self.__dict__.pop("get", None)

    def _key_error(self, key: bytes) -> StateAccessError:
        limit = self._store.max_key_size
        return StateAccessError(
            f"state {self.name!r}: a stored key of {len(key)} bytes exceeds LMDB's maximum key size of {limit} "
            f"bytes (2-byte key group + length-prefixed key and namespace [+ map user key]); use smaller keys, "
            f"namespaces or map keys, or a key serializer that hashes long keys")

    def get(self, key: bytes) -> bytes | None:  # while no cursor is open (see the class)
        return self._open_cursor().get(key)

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
        store.log.append((self._db, lower, RangeEnd(upper)))
        try:
            delete_range(txn, self._db, lower, upper, store.max_key_size)
        except lmdb.MapFullError:
            store.recover_from_full()
        store.budget -= _ENTRY_OVERHEAD
        if store.budget < 0:
            store.commit()

    def put_many(self, entries: Iterable[tuple[bytes, bytes]]) -> None:
        self.write_many(entries)

    def write_many(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Runs of puts go to LMDB in one ``putmulti`` call each, cut where the store's write budget
        runs out (the transaction is committed there, as ``put`` does) and at every delete."""
        store = self._store
        run: list[tuple[bytes, bytes]] = []
        cost = 0
        for key, value in entries:
            if value is None:
                self._put_run(run, cost)
                run, cost = [], 0
                self.delete(key)
                continue
            if len(key) > store.max_key_size:
                self._put_run(run, cost)
                raise self._key_error(key)
            run.append((key, value))
            cost += len(value) + _ENTRY_OVERHEAD
            if cost >= store.budget:
                self._put_run(run, cost)
                run, cost = [], 0
        self._put_run(run, cost)

    def _put_run(self, run: list[tuple[bytes, bytes]], cost: int) -> None:
        if not run:
            return
        cursor = self._cursor
        if cursor is None:
            cursor = self._open_cursor()
        store = self._store
        db = self._db
        store.log.extend([(db, key, value) for key, value in run])
        try:
            cursor.putmulti(run)
        except lmdb.MapFullError:  # the log holds the whole run: the replay completes it
            store.recover_from_full()
        store.budget -= cost
        if store.budget < 0:
            store.commit()

    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The range as of this call. Up to ``MATERIALIZE_LIMIT`` entries are read into a list at
        once (a map of one key, typically); a larger range continues from a read snapshot, so
        writes during the iteration cannot reach it and memory stays bounded."""
        store = self._store
        cursor = self._cursor  # the table's cursor: ``get`` and ``put`` do not depend on its position
        if cursor is None:
            cursor = self._open_cursor()
        first = read_range(cursor, lower, upper, MATERIALIZE_LIMIT, store.max_key_size)
        if len(first) < MATERIALIZE_LIMIT:
            return iter(first)
        # nothing was written since ``first`` was read: the snapshot continues it exactly
        snapshot = store.open_snapshot()
        return SnapshotIterator(first, snapshot, self.name, first[-1][0] + b"\x00", upper)
