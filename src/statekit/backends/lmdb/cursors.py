"""Range reads and deletes with an LMDB cursor, bounded by the environment's largest key."""
from __future__ import annotations

from typing import Any


class RangeEnd:
    """Marks a logged ``delete_range``: ``(db, lower, RangeEnd(upper))``."""

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
