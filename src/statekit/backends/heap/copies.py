"""Map user keys and namespaces as the heap backend holds them, so that it behaves like a backend
that stores bytes (values are copies: ``backends.common.copies``).

*User keys, and namespaces, are equal when their serialized bytes are.* A dict would merge ``1``,
``True``, ``1.0`` and ``numpy.int64(1)`` (equal in Python), which a byte store keeps apart, and keep
apart two NaNs or two objects compared by identity, which a byte store merges. A value of one of
its serializer's ``BYTE_EQUALITY_TYPES`` (``int``, ``str`` and ``bytes`` for the built-in
serializers, ``TimeWindow`` for ``TimeWindowSerializer``) is held as itself: for it, Python
equality is byte equality. Every other value is held as its serialized bytes wrapped in
``SerializedKey``, which never equals a value held as itself, unless those bytes read back as such
a value.
"""
from __future__ import annotations

from typing import Any

from statekit.backends.common.namespaces import encode_namespace, may_encode_empty
from statekit.spi.serializer import TypeSerializer, byte_equality_types
from statekit.spi.state import VOID_NAMESPACE


class SerializedKey(tuple):  # type: ignore[type-arg]
    """A map user key or namespace held by its serialized bytes, as ``SerializedKey((data,))``: a
    tuple, so that the dict operations of every state access hash and compare it in C. It equals no
    value held as itself (no type held as itself is a tuple)."""

    __slots__ = ()

    @property
    def data(self) -> bytes:
        return self[0]  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"SerializedKey({self[0]!r})"


class UserKeys:
    """Converts map user keys between the user's objects, the heap's dict keys and bytes."""

    def __init__(self, serializer: TypeSerializer) -> None:
        self._serialize = serializer.serialize
        self._deserialize = serializer.deserialize
        #: the key types held as themselves
        self.plain = byte_equality_types(serializer)

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
        return SerializedKey((data,))

    def user_key(self, held: Any) -> Any:
        """The user's object of a held key (a fresh one for serialized keys)."""
        return self._deserialize(held.data) if type(held) is SerializedKey else held

    def to_bytes(self, held: Any) -> bytes:
        return held.data if type(held) is SerializedKey else self._serialize(held)


class Namespaces:
    """Converts namespaces between the user's objects, the heap's dict keys and their bytes
    (``common.namespaces``): held as ``UserKeys`` hold map user keys, the void namespace as itself."""

    def __init__(self, serializer: TypeSerializer) -> None:
        self._serializer = serializer
        self._values = UserKeys(serializer)
        #: the namespace types held as themselves without a look at their bytes; a serializer that
        #: may write no bytes for a namespace has every other namespace encoded, so that it is refused
        self.plain = frozenset({type(VOID_NAMESPACE)}) | (frozenset() if may_encode_empty(serializer)
                                                           else self._values.plain)

    def held(self, namespace: Any) -> Any:
        """The dict key holding ``namespace``."""
        if type(namespace) in self.plain:
            return namespace
        return self._values.held_from_bytes(encode_namespace(namespace, self._serializer))

    def held_from_bytes(self, data: bytes) -> Any:
        """The dict key of the namespace stored as ``data``."""
        return self._values.held_from_bytes(data) if data else VOID_NAMESPACE

    def namespace(self, held: Any) -> Any:
        """The user's object of a held namespace (a fresh one for serialized namespaces)."""
        return self._values.user_key(held)

    def to_bytes(self, held: Any) -> bytes:
        return held.data if type(held) is SerializedKey else encode_namespace(held, self._serializer)
