"""msgpack: compact and language-neutral.

``MsgpackSerializer`` round-trips ``None``, ``bool``, ``int`` (from -2**63 to 2**64-1),
``float``, ``str``, ``bytes``, ``list``, ``dict`` and ``tuple``, nested in any way. A tuple is
written as msgpack extension type 1 holding an array, so it comes back a tuple (also as a map
key); a subclass of these types comes back as its base type (a namedtuple as a tuple, an
``OrderedDict`` as a dict, an ``IntEnum`` as an int); ``bytearray`` and ``memoryview`` come
back as ``bytes``. Anything else is a ``SerializationError``: use ``PickleSerializer``.

Version 1 of this serializer wrote tuples as plain arrays; version 2 reads that state as it
always did (such tuples stay lists), so checkpoints written by version 1 keep restoring. One
consequence: a tuple map key written by version 1 is stored as an array, so on backends that
compare keys by their bytes a lookup with the tuple no longer finds it; iterate the map (the key
comes back as a list) and put the entry again under the tuple to migrate it.
"""
from __future__ import annotations

from typing import Any, Iterable

import msgpack

from statekit.spi.errors import SerializationError
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer, reads_older_versions

TUPLE_EXT = 1
_BASE_TYPES = (int, float, str, bytes, list, dict)


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, default=_default, strict_types=True, use_bin_type=True)


def _default(value: Any) -> Any:
    """What msgpack cannot pack as it is (``strict_types``: only exact types are packed)."""
    if isinstance(value, tuple):
        return msgpack.ExtType(TUPLE_EXT, _pack(list(value)))
    for base in _BASE_TYPES:
        if isinstance(value, base):
            return base(value)
    raise TypeError(f"cannot serialize {type(value).__name__!r} object")


def _ext_hook(code: int, data: bytes) -> Any:
    if code != TUPLE_EXT:
        raise ValueError(f"unknown msgpack extension type {code}")
    return tuple(_unpack(data))


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True, ext_hook=_ext_hook)


class MsgpackSerializer(TypeSerializer[Any]):
    VERSION = 2
    BYTE_EQUALITY_TYPES = frozenset({int, str, bytes})

    def __init__(self) -> None:
        self._packer = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)

    def serialize(self, value: Any) -> bytes:
        try:
            return self._packer.pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(
                f"msgpack cannot encode a value of type {type(value).__name__}: {exc}; use "
                f"PickleSerializer for arbitrary objects") from exc

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
