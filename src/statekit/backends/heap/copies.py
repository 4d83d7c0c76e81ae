"""User keys as the heap backend holds them, so that it behaves like a backend that stores bytes
(values are copies: ``backends.common.copies``).

*User keys are equal when their serialized bytes are.* A dict would merge ``1``, ``True`` and
``1.0`` (equal in Python), which a byte store keeps apart. Keys of exactly ``int``, ``str`` or
``bytes`` are held as themselves (for them, and for the built-in serializers, Python equality is
byte equality); every other key, and every key of a custom serializer, is held as its serialized
bytes wrapped in ``SerializedKey``, which never equals a plain key.
"""
from __future__ import annotations

from typing import Any

from statekit.serializers import BytesSerializer, Int64Serializer, PickleSerializer, StringSerializer
from statekit.spi.serializer import TypeSerializer


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
