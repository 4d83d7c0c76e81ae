"""Namespace bytes: the void namespace is the empty byte string, any other is serialized.

A namespace whose serializer writes no bytes for it (``""`` with ``StringSerializer``, ``b""`` with
``BytesSerializer``) would be stored as the void namespace: ``encode_namespace`` refuses it rather
than merge the two.
"""
from __future__ import annotations

from typing import Any

from statekit.serializers import MsgpackSerializer, PickleSerializer
from statekit.spi.errors import StateAccessError
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import VOID_NAMESPACE

VOID_NAMESPACE_BYTES = b""


def encode_namespace(namespace: Any, serializer: TypeSerializer) -> bytes:
    if namespace is VOID_NAMESPACE:
        return VOID_NAMESPACE_BYTES
    encoded = serializer.serialize(namespace)
    if not encoded:
        raise StateAccessError(
            f"namespace {namespace!r} serializes to no bytes with {type(serializer).__name__}, which is how the "
            f"void namespace is stored, so the two would be one; use a namespace serializer that writes at least "
            f"one byte for every namespace (the default, MsgpackSerializer, does)")
    return encoded


def may_encode_empty(serializer: TypeSerializer) -> bool:
    """Whether ``serializer`` may write no bytes for some namespace: a backend that holds namespaces
    as objects (the heap) encodes those of such a serializer when they are set, to refuse them then
    rather than at its next snapshot."""
    return not (type(serializer) in (PickleSerializer, MsgpackSerializer) or serializer.FIXED_SIZE)


def decode_namespace(data: bytes, serializer: TypeSerializer) -> Any:
    if not data:
        return VOID_NAMESPACE
    return serializer.deserialize(data)
