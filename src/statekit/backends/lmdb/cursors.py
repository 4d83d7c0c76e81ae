"""Range reads and deletes with an LMDB cursor, bounded by the environment's largest key."""
from __future__ import annotations

import functools
import itertools
import operator
from typing import Any, Iterator


def _seek(cursor: Any, lower: bytes, max_key: int) -> bool:
    """Position ``cursor`` at the first key ``>= lower`` (or at a smaller key that the caller skips
    when ``lower`` is longer than LMDB keys may be: no stored key equals it)."""
    if not lower:
        return cursor.first()
    return cursor.set_range(lower if len(lower) <= max_key else lower[:max_key])


def read_range(cursor: Any, lower: bytes, upper: bytes, limit: int, max_key: int) -> list[tuple[bytes, bytes]]:
    """Up to ``limit`` entries with ``lower <= key < upper``, in key order. The cursor's C iterator
    is bounded by C predicates (``(bound,)`` sorts before every ``(key, value)`` with ``key >=
    bound``), so no Python code runs per entry."""
    if not _seek(cursor, lower, max_key):
        return []
    entries: Iterator[tuple[bytes, bytes]] = cursor.iternext()
    if len(lower) > max_key:  # the cursor may stand on the one key that is lower's truncation
        entries = itertools.dropwhile(functools.partial(operator.gt, (lower,)), entries)
    return list(itertools.islice(itertools.takewhile(functools.partial(operator.gt, (upper,)), entries), limit))


def read_columns(cursor: Any, lower: bytes, upper: bytes, max_key: int,
                 limit: int | None = None) -> tuple[list[bytes], list[bytes]] | None:
    """The keys, then the values, with ``lower <= key < upper``: two passes of the cursor's C
    iterator (keys only, then as many values only), which make no tuple per entry. With ``limit``:
    None if the range holds more entries (no more than ``limit + 1`` keys read)."""
    if not _seek(cursor, lower, max_key):
        return [], []
    found: Iterator[bytes] = cursor.iternext(keys=True, values=False)
    if len(lower) > max_key:
        found = itertools.dropwhile(functools.partial(operator.gt, lower), found)
    in_range = itertools.takewhile(functools.partial(operator.gt, upper), found)
    keys = list(in_range if limit is None else itertools.islice(in_range, limit + 1))
    if limit is not None and len(keys) > limit:
        return None
    if not keys:
        return [], []
    cursor.set_key(keys[0])
    return keys, list(itertools.islice(cursor.iternext(keys=False, values=True), len(keys)))


def delete_range(txn: Any, db: Any, lower: bytes, upper: bytes, max_key: int) -> None:
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


def database_names(txn: Any) -> list[bytes]:
    """The names of the named databases of ``txn``'s environment (the keys of its main database)."""
    return [bytes(name) for name, _ in txn.cursor()]
