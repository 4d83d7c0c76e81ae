"""What a restored state's values become when the job registers it with another value serializer
or with TTL turned on or off: one function from a value as the restored serializer reads it to
the value the registered one writes (``DROPPED``: the entry goes).

- a serializer that answers ``COMPATIBLE_AFTER_MIGRATION``: ``migrate`` of each value;
- TTL turned on: each entry is written now (the epoch's processing time; with event-time TTL the
  watermark, as no element is processed), so it lives a full TTL;
- TTL turned off: entries expired by the old TTL (on its own clock) are dropped (as a read would
  have), the others keep their values and never expire.
"""
from __future__ import annotations

from typing import Any, Callable

from statekit.backends.common.ttl import TtlSerializer
from statekit.spi.serializer import Compatibility, TypeSerializer, compatibility

#: what ``value_migration`` gives for an entry that is not kept
DROPPED = object()

Migration = Callable[[Any], Any]


def value_migration(previous: TypeSerializer, new: TypeSerializer, written_ms: int,
                    expired_by_ms: int | None) -> Migration:
    """From a value ``previous`` read (with its TTL timestamp where it had TTL) to the one ``new``
    writes. ``written_ms``: the write time of entries that get TTL; ``expired_by_ms``: entries that
    lose TTL and were written at or before it are dropped (None: none are expired)."""
    had_ttl, has_ttl = isinstance(previous, TtlSerializer), isinstance(new, TtlSerializer)
    old_inner = previous.inner if isinstance(previous, TtlSerializer) else previous
    new_inner = new.inner if isinstance(new, TtlSerializer) else new
    if compatibility(new_inner, old_inner.snapshot()) is Compatibility.COMPATIBLE_AS_IS:
        inner: Migration = _same
    else:
        def inner(value: Any) -> Any:
            return new_inner.migrate(value, old_inner)
    if had_ttl and has_ttl:
        return lambda entry: (entry[0], inner(entry[1]))
    if has_ttl:
        return lambda value: (written_ms, inner(value))
    if had_ttl and expired_by_ms is not None:
        deadline = expired_by_ms
        return lambda entry: DROPPED if entry[0] <= deadline else inner(entry[1])
    if had_ttl:
        return lambda entry: inner(entry[1])
    return inner


def _same(value: Any) -> Any:
    return value
