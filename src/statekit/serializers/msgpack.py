"""msgpack: compact and language-neutral; the default serializer.

``MsgpackSerializer`` round-trips ``None``, ``bool``, ``int`` (from -2**63 to 2**64-1),
``float``, ``str``, ``bytes``, ``list``, ``dict`` and ``tuple``, nested in any way, and the
values of Spark's other atomic types: ``datetime.date``, ``datetime.datetime`` and
``decimal.Decimal``. Extension types carry what msgpack has no type for:

- 1: a tuple, as an array (so it comes back a tuple, also as a map key);
- 2: a ``Decimal``, as its string (``"1.50"``: the exponent is kept);
- 3: a ``date``, as days since 1970-01-01;
- 4: a naive ``datetime``, as microseconds of its wall-clock time since 1970-01-01 00:00;
- -1 (msgpack's own timestamp): an aware ``datetime``, as the instant; it comes back in UTC.

A subclass of these types comes back as its base type (a namedtuple as a tuple, an
``OrderedDict`` as a dict, an ``IntEnum`` as an int), a numpy scalar as its Python value
(``numpy.int64(1)`` as ``1``); ``bytearray`` and ``memoryview`` come back as ``bytes``. Anything else is a ``SerializationError``: declare the state's type (a
dataclass) or use ``PickleSerializer``. Reading runs no code.

Version 1 wrote tuples as plain arrays; later versions read that state as it always was (such
tuples stay lists), so checkpoints written by version 1 keep restoring. One consequence: a tuple
map key written by version 1 is stored as an array, so on backends that compare keys by their
bytes a lookup with the tuple no longer finds it; iterate the map (the key comes back as a list)
and put the entry again under the tuple to migrate it. Version 3 added the extension types 2-4
and -1 (values version 2 refused), so it reads what versions 1 and 2 wrote.
"""
from __future__ import annotations

import datetime
import decimal
from typing import Any, Iterable

import msgpack
import numpy as np

from statekit.spi.errors import SerializationError
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer, reads_older_versions

TUPLE_EXT = 1
DECIMAL_EXT = 2
DATE_EXT = 3
NAIVE_DATETIME_EXT = 4
_BASE_TYPES = (int, float, str, bytes, list, dict)
_PACKED_AS_IS = frozenset({int, float, bool, str, bytes, type(None)})
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_default, strict_types=True, use_bin_type=True)


def _default(value: Any) -> Any:
    """What msgpack cannot pack as it is (``strict_types``: only exact types are packed)."""
    if isinstance(value, tuple):
        return msgpack.ExtType(TUPLE_EXT, _pack(list(value)))
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None and value.utcoffset() is not None:
            return msgpack.Timestamp.from_datetime(value)
        return msgpack.ExtType(NAIVE_DATETIME_EXT, _pack((value.replace(tzinfo=None) - _EPOCH_NAIVE) // _MICROSECOND))
    if isinstance(value, datetime.date):
        return msgpack.ExtType(DATE_EXT, _pack(value.toordinal() - _EPOCH_ORDINAL))
    if isinstance(value, decimal.Decimal):
        return msgpack.ExtType(DECIMAL_EXT, str(value).encode())
    if isinstance(value, np.generic):  # a numpy scalar (what pandas and Arrow columns give): its Python value
        item = value.item()
        return item if item.__class__ in _PACKED_AS_IS else _default(item)
    for base in _BASE_TYPES:
        if isinstance(value, base):
            return base(value)
    raise TypeError(f"cannot serialize {type(value).__name__!r} object")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == TUPLE_EXT:
        return tuple(_unpack(data))
    if code == DECIMAL_EXT:
        return decimal.Decimal(data.decode())
    if code == DATE_EXT:
        return datetime.date.fromordinal(_unpack(data) + _EPOCH_ORDINAL)
    if code == NAIVE_DATETIME_EXT:
        return _EPOCH_NAIVE + datetime.timedelta(microseconds=_unpack(data))
    raise ValueError(f"unknown msgpack extension type {code}")


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True, ext_hook=_ext_hook, timestamp=3)


class MsgpackSerializer(TypeSerializer[Any]):
    VERSION = 3
    BYTE_EQUALITY_TYPES = frozenset({int, str, bytes})
    SCHEMALESS = True

    def __init__(self) -> None:
        self._packer = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)

    def serialize(self, value: Any) -> bytes:
        try:
            return self._packer.pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(
                f"msgpack cannot encode a value of type {type(value).__name__}: {exc}; declare the state's type "
                f"(type=a dataclass) or use PickleSerializer for arbitrary objects") from exc

    def serialize_many(self, values: Iterable[Any]) -> list[bytes]:
        """With a packer of its own: snapshot writers call this on their thread while the task may
        call ``serialize`` (a msgpack ``Packer`` fills one buffer, and switches threads in ``default``)."""
        values = values if isinstance(values, (list, tuple)) else list(values)
        pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
        try:
            return [pack(value) for value in values]
        except (TypeError, ValueError, OverflowError):  # the value that failed gets serialize's error message
            serialize = self.serialize
            return [serialize(value) for value in values]

    def deserialize(self, data: bytes) -> Any:
        try:
            return _unpack(data)
        except Exception as exc:
            raise SerializationError(f"cannot decode {len(data)} bytes as msgpack: {exc}") from exc

    def resolve_compatibility(self, previous: SerializerSnapshot) -> Compatibility:
        return reads_older_versions(self, previous)

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]
