"""The serializers a state descriptor declares, by role: its serializer where it names one, else
the one for the type it declares (``type=``, ``key_type=``, ``value_type=``), else none (the
backend's registration then takes the default, ``statekit.serializers.DEFAULT_SERIALIZER``, or
the serializer the restored state was written with)."""
from __future__ import annotations

import dataclasses
from typing import Any

from statekit.serializers.primitives import BytesSerializer, Float64Serializer, Int64Serializer, StringSerializer
from statekit.spi.descriptors import StateDescriptor
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer

_ATOMIC: dict[type, type[TypeSerializer]] = {
    int: Int64Serializer, float: Float64Serializer, str: StringSerializer, bytes: BytesSerializer,
}


def serializer_for_type(declared: Any, where: str = "the state") -> TypeSerializer:
    """The schema'd serializer of a declared type: ``int``, ``float``, ``str``, ``bytes`` by their
    fixed-format serializers; a dataclass, a ``StructType`` or a DDL string by ``RecordSerializer``."""
    if declared in _ATOMIC:
        return _ATOMIC[declared]()
    from pyspark.sql.types import StructType  # noqa: PLC0415 - pyspark only for record types

    if isinstance(declared, (StructType, str)) or isinstance(declared, type) and dataclasses.is_dataclass(declared):
        from statekit.serializers.record import RecordSerializer  # noqa: PLC0415

        return RecordSerializer(declared)
    raise ConfigurationError(
        f"{where} declares type {declared!r}, which has no schema'd serializer: declare int, float, str, bytes, "
        f"a dataclass, a StructType or a DDL string (\"a bigint, b string\"); hold other values in a dataclass "
        f"field, or pass serializer=MsgpackSerializer() (any msgpack value)")


def declared_serializers(descriptor: StateDescriptor) -> dict[str, TypeSerializer | None]:
    """``descriptor.serializers()`` with each role's declared type turned into its serializer."""
    serializers = descriptor.serializers()
    for role, declared in descriptor.declared_types().items():
        if declared is not None and serializers.get(role) is None:
            serializers[role] = serializer_for_type(declared, f"state {descriptor.name!r} ({role.replace('_', ' ')})")
    return serializers
