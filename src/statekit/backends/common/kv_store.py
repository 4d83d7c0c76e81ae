"""The minimal ordered key-value contract that ``KVKeyedStateBackend`` is built on.

A store holds one ``KVTable`` per state (a RocksDB column family, an LMDB named database, a
SQLite table, ...). Keys and values are bytes; tables are ordered bytewise.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from itertools import islice
from typing import Iterable, Iterator, Sequence


class KVTable(ABC):
    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    @abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abstractmethod
    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``lower <= key < upper`` in key order, as of when the call was made:
        writes during the iteration must not affect it."""

    @abstractmethod
    def delete_range(self, lower: bytes, upper: bytes) -> None:
        """Delete every entry with ``lower <= key < upper``."""

    def first(self, lower: bytes, upper: bytes) -> tuple[bytes, bytes] | None:
        """The first entry of ``items(lower, upper)``, or None if the range is empty (map state's
        ``is_empty``, the head of a timer queue); override where starting ``items`` reads ahead."""
        return next(iter(self.items(lower, upper)), None)

    def first_keys(self, lower: bytes, upper: bytes, limit: int) -> list[bytes]:
        """The first ``limit`` keys of ``items(lower, upper)`` (a timer queue's next timers);
        override where starting ``items`` reads further ahead."""
        return [key for key, _ in islice(self.items(lower, upper), limit)]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The value of each key (None where missing); override where the store reads faster in bulk."""
        get = self.get
        return [get(key) for key in keys]

    def write_many(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Put each entry in order, deleting where the value is None; override with a batched
        write where the store has one (later reads must see every entry)."""
        put, delete = self.put, self.delete
        for key, value in entries:
            if value is None:
                delete(key)
            else:
                put(key, value)

    def put_many(self, entries: Iterable[tuple[bytes, bytes]]) -> None:
        """Bulk load (restore); override with a batched write where the store has one."""
        for key, value in entries:
            self.put(key, value)


class KVView(ABC):
    """A consistent read-only view of all tables, taken at one instant (snapshot sync part)."""

    #: reading one key with ``entries_at`` costs about as much as scanning this many entries: a
    #: changelog delta scans a key group that holds at most this many entries per changed cell
    key_read_cost = 16

    @abstractmethod
    def items(self, table: str, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]: ...

    def columns(self, table: str, lower: bytes, upper: bytes) -> tuple[list[bytes], list[bytes]]:
        """The keys and the values of ``items``, as two lists (snapshot writers read a key group
        at once); override where the store lists them faster."""
        entries = list(self.items(table, lower, upper))
        return [key for key, _ in entries], [value for _, value in entries]

    def columns_upto(self, table: str, lower: bytes, upper: bytes,
                     limit: int) -> tuple[list[bytes], list[bytes]] | None:
        """``columns`` if the range holds at most ``limit`` entries, else None, having read no more
        than ``limit + 1`` of them; override where the store counts keys faster."""
        entries = list(islice(self.items(table, lower, upper), limit + 1))
        if len(entries) > limit:
            return None
        return [key for key, _ in entries], [value for _, value in entries]

    def entry_count(self, table: str) -> int | None:
        """How many entries the table holds, if the store knows without reading them (a changelog
        delta then skips the scan of key groups that hold too many entries on average); None
        where it does not."""
        return None

    def entries_at(self, table: str, keys: Sequence[bytes]) -> tuple[list[bytes], list[bytes]]:
        """The keys among ``keys`` (sorted, distinct) that the table holds, and their values;
        override where the store reads many keys in one call (and set ``key_read_cost``)."""
        entries = [entry for key in keys for entry in self.items(table, key, key + b"\x00")]
        return [key for key, _ in entries], [value for _, value in entries]

    def release(self) -> None:
        """Free the view's resources; called once the snapshot is written or dropped."""
