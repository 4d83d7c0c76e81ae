"""Namespace bytes: the void namespace is the empty byte string, any other is serialized.

No serializer we ship produces zero bytes for a value, so the encoding is unambiguous.
"""
from __future__ import annotations

from typing import Any

from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import VOID_NAMESPACE

VOID_NAMESPACE_BYTES = b""


def encode_namespace(namespace: Any, serializer: TypeSerializer) -> bytes:
    if namespace is VOID_NAMESPACE:
        return VOID_NAMESPACE_BYTES
    return serializer.serialize(namespace)


def decode_namespace(data: bytes, serializer: TypeSerializer) -> Any:
    if not data:
        return VOID_NAMESPACE
    return serializer.deserialize(data)
