"""Values as state that lives in Python objects holds them (heap keyed state, operator state), so
that it behaves like state stored as bytes.

*Values are copies.* A value read from state is the caller's own copy, and a value passed to
``update``/``add``/``put`` is copied on the way in: a change reaches the state only through a
state method, never by mutating an object in place (RocksDB and LMDB store serialized bytes and
behave so by construction). Held objects are therefore never shared with user code, which is
also what lets a copy-on-write snapshot keep its point in time. Atomic values (None, bool,
numbers, str, bytes, datetimes, decimals, UUIDs) and tuples/frozensets, lists and dicts of them, the common case, are
copied shallowly or not at all, and nested lists, tuples and dicts level by level; anything else
is deep-copied.
"""
from __future__ import annotations

import copy
import datetime
import decimal
import uuid
from typing import Any

from statekit.spi.errors import SerializationError

#: immutable types held and handed out as they are (the datetimes and decimals of Spark rows too)
ATOMIC = frozenset({type(None), bool, int, float, complex, str, bytes, datetime.datetime, datetime.date,
                    datetime.time, datetime.timedelta, decimal.Decimal, uuid.UUID})


#: how deep ``detached`` copies lists, tuples and dicts itself before it leaves the rest to
#: ``copy.deepcopy`` (which also keeps shared and cyclic references as they are)
_NESTING = 4


def detached(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` that shares no mutable object with it (``value`` itself if immutable).
    Lists, tuples and dicts (with atomic keys) a few levels deep, such as a list of row dicts, are
    copied level by level: ten times faster than ``copy.deepcopy``."""
    kind = type(value)
    if kind in ATOMIC:
        return value
    # ``ATOMIC.issuperset(map(type, ...))``: whether every element is atomic, in one C-level pass
    if kind is tuple or kind is frozenset:
        if ATOMIC.issuperset(map(type, value)):
            return value
        if kind is tuple and depth < _NESTING:
            return tuple([detached(v, depth + 1) for v in value])
        return _deep_copy(value)
    if kind is list:
        if ATOMIC.issuperset(map(type, value)):
            return list(value)
        return [detached(v, depth + 1) for v in value] if depth < _NESTING else _deep_copy(value)
    if kind is dict and ATOMIC.issuperset(map(type, value)):
        if ATOMIC.issuperset(map(type, value.values())):
            return dict(value)
        if depth < _NESTING:
            return {k: detached(v, depth + 1) for k, v in value.items()}
    return _deep_copy(value)


def _deep_copy(value: Any) -> Any:
    try:
        return copy.deepcopy(value)
    except Exception as exc:  # noqa: BLE001 - deepcopy fails as pickling does: TypeError, PicklingError, ...
        raise SerializationError(f"a {type(value).__name__} cannot be kept in state: copying it failed "
                                 f"({type(exc).__name__}: {exc}); state values must be serializable") from exc


def detached_list(values: list[Any]) -> list[Any]:
    """A new list of detached elements."""
    if ATOMIC.issuperset(map(type, values)):
        return list(values)
    return [detached(v) for v in values]
