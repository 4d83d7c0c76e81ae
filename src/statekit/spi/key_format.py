"""The key format: the bytes keyed state stores a key under.

A stored key is the key serializer's bytes of the key in the key format of the state:

* format 1 (state written before the key format was recorded): the key as given. An aware
  ``datetime`` keeps its time zone in its bytes, so one instant seen in two time zones (Spark
  gives timestamp keys in the session time zone) was stored under two byte strings.
* format 2 (``KEY_FORMAT``, what new state is written in): every aware ``datetime``, a key or a
  part of a tuple key, in UTC first, so that one instant is one byte string, as Spark groups
  timestamps, as the key group hash takes them and as a dict of keys finds them. A naive
  ``datetime`` (Spark's ``TIMESTAMP_NTZ``) is a wall-clock time, not an instant: it stays as given.

The format travels in the key serializer's snapshot, which every keyed state handle records, as
the field ``key_format`` of its config (``KEY_FORMAT_FIELD``; absent: format 1, so a key
serializer's own config must not use that name). A keyed backend writes new state in
``KEY_FORMAT`` and restored state in the format it was written in (``KeyBytes.restored``): the
bytes of checkpoints, savepoints and working state are not rewritten, and a key of format-1 state
is found under the bytes it always had. A key read back from format-2 state (``keys()``, a
timer's key, the state readers) is the instant in UTC.
"""
from __future__ import annotations

import datetime as _dt
import decimal
from itertools import chain
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from statekit.spi.errors import ConfigurationError, CorruptStateError, RestoreError
from statekit.spi.serializer import SerializerSnapshot, TypeSerializer

if TYPE_CHECKING:
    import pyarrow as pa  # imported where used: the contracts load no pyarrow

    from statekit.spi.handles import KeyedStateHandle

KEY_FORMAT_FIELD = "key_format"
#: the key as given (state whose key serializer snapshot has no ``key_format``)
KEYS_AS_GIVEN = 1
#: aware datetimes in UTC
UTC_INSTANTS = 2
#: the format new state is written in
KEY_FORMAT = UTC_INSTANTS

_UTC = _dt.timezone.utc
#: classes of keys that hold no instant: every key format stores them as given, without looking
#: inside (hot paths test a key's class against this set, and call ``KeyBytes.canonical`` only
#: for the others: datetimes, tuples, subclasses)
PLAIN_KEY_CLASSES = frozenset({str, int, float, bool, bytes, type(None), _dt.date, decimal.Decimal})


def utc_instants(key: Any) -> Any:
    """``key`` with every aware ``datetime`` in UTC: the key itself, or each part of a tuple key."""
    if isinstance(key, _dt.datetime):
        return _in_utc(key)
    if isinstance(key, tuple) and any(isinstance(part, _dt.datetime) for part in key):
        return tuple(_in_utc(part) if isinstance(part, _dt.datetime) else part for part in key)
    return key


def _in_utc(value: _dt.datetime) -> _dt.datetime:
    if value.utcoffset() is None:  # naive: a wall-clock time, not an instant
        return value
    try:
        return value.astimezone(_UTC)
    except OverflowError:  # within a day of datetime's range, past which no UTC datetime holds it
        return value


class KeyBytes:
    """The key serializer as keyed state applies it: its bytes of keys in one key format."""

    __slots__ = ("serializer", "key_format", "_snapshot")

    def __init__(self, serializer: TypeSerializer, key_format: int = KEY_FORMAT) -> None:
        self.serializer = serializer
        self.key_format = key_format
        snapshot = serializer.snapshot()
        if KEY_FORMAT_FIELD in snapshot.config:
            raise ConfigurationError(
                f"the key serializer {snapshot.identity} has a config field {KEY_FORMAT_FIELD!r}, which keyed state "
                f"records its key format in; rename that constructor argument of the serializer")
        if key_format != KEYS_AS_GIVEN:
            snapshot = SerializerSnapshot(snapshot.identity, snapshot.version,
                                          {**snapshot.config, KEY_FORMAT_FIELD: key_format})
        self._snapshot = snapshot

    def canonical(self, key: Any) -> Any:
        """``key`` as this format serializes it."""
        cls = key.__class__
        if cls in PLAIN_KEY_CLASSES or self.key_format < UTC_INSTANTS:
            return key
        if cls is tuple:  # a key of several columns: looked into only where a part is no plain value
            for part in key:
                if part.__class__ not in PLAIN_KEY_CLASSES:
                    return utc_instants(key)
            return key
        return utc_instants(key)

    def serialize(self, key: Any) -> bytes:
        return self.serializer.serialize(self.canonical(key))

    def serialize_many(self, keys: Sequence[Any]) -> list[bytes]:
        return self.serializer.serialize_many(self._canonical_many(keys))

    def serialize_arrow(self, keys: Sequence[Any]) -> "pa.Array":
        return self.serializer.serialize_arrow(self._canonical_many(keys))

    def _canonical_many(self, keys: Sequence[Any]) -> Sequence[Any]:
        """``keys`` as this format serializes them (the classes of keys and of the parts of tuple
        keys looked at in C: nothing is made where no key holds more than plain values)."""
        if self.key_format < UTC_INSTANTS:
            return keys
        classes = set(map(type, keys))
        if classes <= PLAIN_KEY_CLASSES:
            return keys
        if classes == {tuple} and PLAIN_KEY_CLASSES.issuperset(map(type, chain.from_iterable(keys))):
            return keys
        return list(map(self.canonical, keys))

    def snapshot(self) -> SerializerSnapshot:
        """The key serializer's snapshot with the key format: what keyed state handles record."""
        return self._snapshot

    def restored(self, key_format: int) -> "KeyBytes":
        """These key bytes once state written in ``key_format`` is restored too: the older format of
        the two. State restored from snapshots of different formats (a rescale that merges the
        state of a subtask that had none, and so started afresh, with older state) is written in
        the oldest, under which the newer bytes are found as well when the key is given in UTC."""
        return self if key_format >= self.key_format else KeyBytes(self.serializer, key_format)


def read_key_serializer(data: Mapping[str, Any]) -> tuple[SerializerSnapshot, int]:
    """A keyed state handle's ``key_serializer``: the serializer's own snapshot and the key format."""
    snapshot = SerializerSnapshot.from_json(data)
    if KEY_FORMAT_FIELD not in snapshot.config:
        return snapshot, KEYS_AS_GIVEN
    config = dict(snapshot.config)
    key_format = config.pop(KEY_FORMAT_FIELD)
    if not isinstance(key_format, int) or isinstance(key_format, bool) or key_format < KEYS_AS_GIVEN:
        raise CorruptStateError(f"the key serializer's {KEY_FORMAT_FIELD} must be a positive integer, "
                                f"got {key_format!r}")
    if key_format > KEY_FORMAT:
        raise RestoreError(f"the state's keys are in key format {key_format}, written by a newer statekit; this one "
                           f"reads formats up to {KEY_FORMAT}: upgrade statekit to restore or read it")
    return SerializerSnapshot(snapshot.identity, snapshot.version, config), key_format


def restored_key_serializer(keyed: Sequence[KeyedStateHandle]) -> TypeSerializer | None:
    """The serializer restored keyed state wrote its keys with (None: no handle says): a job that
    declares none keeps it, since keys are never migrated."""
    return next((read_key_serializer(snapshot)[0].restore_serializer()
                 for h in keyed if (snapshot := h.key_serializer_snapshot()) is not None), None)
