"""One state's named database in the store's write transaction (``KVTable``)."""
from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import lmdb

from statekit.backends.common.kv_store import KVTable
from statekit.backends.lmdb.cursors import delete_range, read_range
from statekit.backends.lmdb.read_snapshot import SnapshotIterator
from statekit.spi.errors import StateAccessError

if TYPE_CHECKING:
    from statekit.backends.lmdb.store import LMDBStore

#: ``items`` of a table reads up to this many entries into memory; a larger range is read from a
#: read snapshot instead (``keys()`` over a whole table, very large maps)
MATERIALIZE_LIMIT = 1024
#: bytes a write counts for besides its value (the key, its slots in ``pending`` and the log)
_ENTRY_OVERHEAD = 96
#: the kinds of ``LMDBTable.log`` entries
_PUTS, _DELETE, _DELETE_RANGE = "puts", "delete", "delete range"
_KEY, _VALUE = itemgetter(0), itemgetter(1)


class LMDBTable(KVTable):
    """A named database, read and written through a cursor of the store's open write transaction
    (py-lmdb's ``Cursor.get``/``put`` are markedly faster than ``Transaction.get``/``put`` with a
    ``db`` argument). The cursor is dropped whenever the transaction ends (``drop_cursor``).

    ``put`` is write-behind: it only records the value in ``pending`` (a dict: a key written again
    keeps its last value); ``flush`` writes them into the transaction in one ``putmulti`` call
    before a range is read or deleted here, and before the store commits. A per-key state's put
    thus costs a dict store instead of a native call with its bookkeeping, and a key written many
    times is written once. ``delete`` drops the key from ``pending`` (the other keys stay).

    While nothing is pending and a cursor is open, ``get`` is the cursor's own method (an instance
    attribute, as in ``ColumnFamilyTable``): the per-key states call it with no Python frame
    between; while writes are pending, it is ``_pending_get``, which looks in ``pending`` first.

    Every write in the open transaction is in ``log`` before it is tried (``_PUTS`` with a flushed
    dict of puts or a ``write_many`` run, ``_DELETE`` with a key, ``_DELETE_RANGE`` with its
    bounds), for the store to ``replay`` after a map growth (``LMDBStore.recover_from_full``);
    ``pending`` is not in the transaction yet, so it outlives a replay as it is."""

    def __init__(self, store: LMDBStore, name: str, db: Any) -> None:
        self._store = store
        self.name = name
        self._db = db
        self._max_key = store.max_key_size
        self._cursor: Any = None  # a cursor of ``store.txn``, or None
        self.log: list[tuple[Any, ...]] = []  # this table's writes in ``store.txn``, in order
        self.pending: dict[bytes, bytes] = {}  # puts not in ``store.txn`` yet (``flush``)

    def _open_cursor(self) -> Any:
        store = self._store
        txn = store.txn
        if txn is None:
            txn = store.begin()
        cursor = self._cursor = txn.cursor(self._db)
        if not self.pending:
            self.get = cursor.get  # type: ignore[method-assign]  # a key too long to store is simply not found
        return cursor

    def drop_cursor(self) -> None:
        """The write transaction ended: its cursor is gone, ``get`` opens the next one (what is
        pending stays, ``_pending_get`` reads it)."""
        self._cursor = None
        if not self.pending:
            self.__dict__.pop("get", None)

    def forget_writes(self) -> None:
        """The write transaction was committed or aborted (no cursor is open): nothing is left to
        replay, and what is pending is dropped (an abort; a commit flushed it first)."""
        self.log.clear()
        self.pending = {}
        self.__dict__.pop("get", None)

    def replay(self, txn: Any) -> None:
        """Write ``log`` again into ``txn`` (a new transaction after a map growth)."""
        for entry in self.log:
            kind = entry[0]
            if kind is _PUTS:
                txn.cursor(self._db).putmulti(entry[1])
            elif kind is _DELETE:
                txn.delete(entry[1], b"", self._db)
            else:
                delete_range(txn, self._db, entry[1], entry[2], self._max_key)

    def _key_error(self, key: bytes) -> StateAccessError:
        limit = self._store.max_key_size
        return StateAccessError(
            f"state {self.name!r}: a stored key of {len(key)} bytes exceeds LMDB's maximum key size of {limit} "
            f"bytes (2-byte key group + length-prefixed key and namespace [+ map user key]); use smaller keys, "
            f"namespaces or map keys, or a key serializer that hashes long keys")

    def get(self, key: bytes) -> bytes | None:  # while no cursor is open and nothing is pending (see the class)
        return self._open_cursor().get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if self._cursor is None:
            self._open_cursor()  # ``get`` is then the cursor's (or ``_pending_get``), not the opener
        return list(map(self.get, keys))

    def _pending_get(self, key: bytes) -> bytes | None:
        data = self.pending.get(key)
        if data is None:
            return (self._cursor or self._open_cursor()).get(key)
        return data

    def put(self, key: bytes, value: bytes) -> None:
        if len(key) > self._max_key:
            raise self._key_error(key)
        pending = self.pending
        if not pending:
            if self._cursor is None:  # refused where opening a cursor is: once disposed, or in a forked child
                self._store._check_usable()
            self.get = self._pending_get  # type: ignore[method-assign]
        pending[key] = value
        store = self._store
        store.budget -= len(value) + _ENTRY_OVERHEAD
        if store.budget < 0:
            store.commit()

    def flush(self) -> None:
        """Write what is pending into the transaction."""
        pending = self.pending
        if pending:
            self.pending = {}
            self._write_run(pending.items())

    def _write_run(self, run: Iterable[tuple[bytes, bytes]]) -> None:
        """Put ``run`` (re-iterable) in one ``putmulti`` call, logged first; nothing is pending."""
        self.log.append((_PUTS, run))
        cursor = self._cursor
        if cursor is None:
            cursor = self._open_cursor()
        else:
            self.get = cursor.get  # type: ignore[method-assign]
        try:
            cursor.putmulti(run)
        except lmdb.MapFullError:  # the log holds the whole run: the replay completes it
            self._store.recover_from_full()

    def _logged(self, entry: tuple[Any, ...]) -> Any:
        """Log ``entry`` (a delete), and return the transaction it is to be done in."""
        self.log.append(entry)
        store = self._store
        return store.begin() if store.txn is None else store.txn

    def _spent(self, cost: int) -> None:
        store = self._store
        store.budget -= cost
        if store.budget < 0:
            store.commit()

    def delete(self, key: bytes) -> None:
        self.pending.pop(key, None)
        txn = self._logged((_DELETE, key))
        try:
            txn.delete(key, b"", self._db)
        except lmdb.MapFullError:  # copy-on-write of the touched pages needs room too
            self._store.recover_from_full()
        self._spent(_ENTRY_OVERHEAD)

    def delete_range(self, lower: bytes, upper: bytes) -> None:
        self.flush()
        txn = self._logged((_DELETE_RANGE, lower, upper))
        try:
            delete_range(txn, self._db, lower, upper, self._max_key)
        except lmdb.MapFullError:
            self._store.recover_from_full()
        self._spent(_ENTRY_OVERHEAD)

    def put_many(self, entries: Iterable[tuple[bytes, bytes]]) -> None:
        self.write_many(entries)

    def write_many(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Runs of puts go to LMDB in one ``putmulti`` call each, cut where the store's write budget
        runs out (the transaction is committed there, as ``put`` does) and at every delete."""
        self.flush()
        store = self._store
        entries = entries if isinstance(entries, list) else list(entries)
        if entries and None not in map(_VALUE, entries) and max(map(len, map(_KEY, entries))) <= self._max_key:
            cost = sum(map(len, map(_VALUE, entries))) + _ENTRY_OVERHEAD * len(entries)
            if cost < store.budget:  # the common case, with no Python code per entry: one run
                self._put_run(entries, cost)  # type: ignore[arg-type]
                return
        run: list[tuple[bytes, bytes]] = []
        cost = 0
        for key, value in entries:
            if value is None:
                self._put_run(run, cost)
                run, cost = [], 0
                self.delete(key)
                continue
            if len(key) > self._max_key:
                self._put_run(run, cost)
                raise self._key_error(key)
            run.append((key, value))
            cost += len(value) + _ENTRY_OVERHEAD
            if cost >= store.budget:
                self._put_run(run, cost)
                run, cost = [], 0
        self._put_run(run, cost)

    def _put_run(self, run: list[tuple[bytes, bytes]], cost: int) -> None:
        if run:
            self._write_run(run)
            self._spent(cost)

    def first(self, lower: bytes, upper: bytes) -> tuple[bytes, bytes] | None:
        """One entry read, where ``items`` reads up to ``MATERIALIZE_LIMIT`` (and, for a larger
        range, commits and opens a read snapshot)."""
        self.flush()
        entries = read_range(self._cursor or self._open_cursor(), lower, upper, 1, self._store.max_key_size)
        return entries[0] if entries else None

    def first_keys(self, lower: bytes, upper: bytes, limit: int) -> list[bytes]:
        """``limit`` keys read at most, where ``items`` reads up to ``MATERIALIZE_LIMIT``."""
        self.flush()
        entries = read_range(self._cursor or self._open_cursor(), lower, upper, limit, self._store.max_key_size)
        return [key for key, _ in entries]

    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The range as of this call. Up to ``MATERIALIZE_LIMIT`` entries are read into a list at
        once (a map of one key, typically); a larger range continues from a read snapshot, so
        writes during the iteration cannot reach it and memory stays bounded."""
        self.flush()
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
