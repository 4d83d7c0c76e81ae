"""Serializer implementations. ``resolve`` maps an undeclared serializer to the default, msgpack:
language-neutral, and reading it runs no code. Pickle is used only where asked for by name.
``declared_serializers`` gives a descriptor's serializers with its declared types resolved."""
from __future__ import annotations

from statekit.serializers.declared import declared_serializers, serializer_for_type
from statekit.serializers.msgpack import MsgpackSerializer
from statekit.serializers.pickle import PickleSerializer
from statekit.serializers.primitives import (
    BytesSerializer, Float64Serializer, Int64Serializer, StringSerializer,
)
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer

DEFAULT_SERIALIZER: TypeSerializer = MsgpackSerializer()

#: short names accepted wherever a serializer is chosen by configuration
BY_NAME: dict[str, type[TypeSerializer]] = {
    "pickle": PickleSerializer, "msgpack": MsgpackSerializer, "int64": Int64Serializer,
    "float64": Float64Serializer, "string": StringSerializer, "bytes": BytesSerializer,
}


def resolve(serializer: TypeSerializer | None) -> TypeSerializer:
    """The serializer to use for a declared one; ``None`` means the default (msgpack)."""
    if serializer is None:
        return DEFAULT_SERIALIZER
    if not isinstance(serializer, TypeSerializer):
        raise ConfigurationError(
            f"{serializer!r} is not a TypeSerializer; pass an instance such as Int64Serializer() "
            f"or one of {sorted(BY_NAME)} via serializer_by_name()")
    return serializer


def serializer_by_name(name: str) -> TypeSerializer:
    try:
        return BY_NAME[name]()
    except KeyError:
        raise ConfigurationError(f"unknown serializer {name!r}; accepted: {sorted(BY_NAME)}") from None


__all__ = ["BY_NAME", "DEFAULT_SERIALIZER", "BytesSerializer", "Float64Serializer",
           "Int64Serializer", "MsgpackSerializer", "PickleSerializer", "StringSerializer",
           "declared_serializers", "resolve", "serializer_by_name", "serializer_for_type"]
