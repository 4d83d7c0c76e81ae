"""Values and user keys as the heap backend holds them, so that it behaves like a backend that
stores bytes.

*Values are copies.* A value read from state is the caller's own copy, and a value passed to
``update``/``add``/``put`` is copied on the way in: a change reaches the state only through a
state method, never by mutating an object in place (RocksDB and LMDB store serialized bytes and
behave so by construction). Held objects are therefore never shared with user code, which is
also what lets a copy-on-write snapshot keep its point in time. Atomic values (None, bool,
numbers, str, bytes) and tuples/frozensets, lists and dicts of them, the common case, are
copied shallowly or not at all; anything else is deep-copied.

*User keys are equal when their serialized bytes are.* A dict would merge ``1``, ``True`` and
``1.0`` (equal in Python), which a byte store keeps apart. Keys of exactly ``int``, ``str`` or
``bytes`` are held as themselves (for them, and for the built-in serializers, Python equality is
byte equality); every other key, and every key of a custom serializer, is held as its serialized
bytes wrapped in ``SerializedKey``, which never equals a plain key.
"""
from __future__ import annotations

import copy
from typing import Any

from statekit.serializers import BytesSerializer, Int64Serializer, PickleSerializer, StringSerializer
from statekit.spi.errors import SerializationError
from statekit.spi.serializer import TypeSerializer

#: immutable types held and handed out as they are
ATOMIC = frozenset({type(None), bool, int, float, complex, str, bytes})


def detached(value: Any) -> Any:
    """A copy of ``value`` that shares no mutable object with it (``value`` itself if immutable)."""
    kind = type(value)
    if kind in ATOMIC:
        return value
    # ``ATOMIC.issuperset(map(type, ...))``: whether every element is atomic, in one C-level pass
    if kind is tuple or kind is frozenset:
        return value if ATOMIC.issuperset(map(type, value)) else _deep_copy(value)
    if kind is list:
        return list(value) if ATOMIC.issuperset(map(type, value)) else _deep_copy(value)
    if kind is dict and ATOMIC.issuperset(map(type, value)) and ATOMIC.issuperset(map(type, value.values())):
        return dict(value)
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


class SerializedKey:
    """A map user key held by its serialized bytes."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __eq__(self, other: object) -> bool:
        return type(other) is SerializedKey and other.data == self.data  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((SerializedKey, self.data))

    def __repr__(self) -> str:
        return f"SerializedKey({self.data!r})"


#: keys whose Python equality is byte equality under the built-in serializers (exact types only)
_PLAIN_KEY_TYPES = frozenset({int, str, bytes})


class UserKeys:
    """Converts map user keys between the user's objects, the heap's dict keys and bytes."""

    def __init__(self, serializer: TypeSerializer) -> None:
        self._serialize = serializer.serialize
        self._deserialize = serializer.deserialize
        builtin = type(serializer) in (PickleSerializer, Int64Serializer, StringSerializer, BytesSerializer)
        #: the key types held as themselves
        self.plain = _PLAIN_KEY_TYPES if builtin else frozenset()

    def held(self, user_key: Any) -> Any:
        """The dict key holding ``user_key``."""
        if type(user_key) in self.plain:
            return user_key
        return self.held_from_bytes(self._serialize(user_key))

    def held_from_bytes(self, data: bytes) -> Any:
        """The dict key of the user key serialized as ``data``."""
        if self.plain:
            user_key = self._deserialize(data)
            if type(user_key) in self.plain:
                return user_key
        return SerializedKey(data)

    def user_key(self, held: Any) -> Any:
        """The user's object of a held key (a fresh one for serialized keys)."""
        return self._deserialize(held.data) if type(held) is SerializedKey else held

    def to_bytes(self, held: Any) -> bytes:
        return held.data if type(held) is SerializedKey else self._serialize(held)
