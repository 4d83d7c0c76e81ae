"""Records: values of one schema (a struct of Spark's types), compact, typed and language-neutral.

``RecordSerializer(schema)`` takes a dataclass, a ``StructType`` or a DDL string. It writes a
value as one msgpack array: ``[generation, field_1, ..., field_n]``, the fields in schema order
(no names: the schema is in the serializer's config, which the checkpoint keeps), each as its
Spark type says (``record_codec``).

``generation`` numbers the format of the value itself (0): a later format gets another number,
so readers tell the two apart. A state whose record schema changed is migrated on restore
(``record_evolution``: fields added with a default, removed, reordered, widened). Nothing in a
value names a Python class, so reading one runs no code of the checkpoint's. Values come back as
the dataclass given (nested dataclasses included), else as ``pyspark.sql.Row``; a value to write
may be that dataclass, a Row, a dict or any object with the fields as attributes. Measured against
pickle and msgpack in ``benchmarks/serializers.py``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import msgpack
from pyspark.sql.types import StructType

from statekit.serializers.record_codec import Codec, struct_decoder, struct_encoder
from statekit.serializers.record_evolution import Incompatible, converter
from statekit.serializers.record_schema import record_classes, struct_of
from statekit.spi.errors import SerializationError
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer

#: the value format this version writes (the first item of every value)
GENERATION = 0


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class RecordSerializer(TypeSerializer[Any]):
    """Values of one record schema (a dataclass, a ``StructType`` or a DDL string); see the module.
    ``record_type``: the class values come back as (default: the dataclass given as the schema,
    else ``Row``); it is no part of the format, so the same state may be read as either."""

    VERSION = 1

    def __init__(self, schema: StructType | str | type, record_type: type | None = None) -> None:
        self.schema = struct_of(schema)
        if record_type is None and isinstance(schema, type) and dataclasses.is_dataclass(schema):
            record_type = schema
        self.record_type = record_type
        self._classes = record_classes(record_type)
        self._build()

    def _build(self) -> None:
        encode_fields = struct_encoder(self.schema, "")
        self._encode: Codec = lambda value: [GENERATION, *encode_fields(value)]
        self._decode_fields = struct_decoder(self.schema, "", self._classes)
        self._packer = msgpack.Packer(use_bin_type=True)
        #: from older schemas, by the id of their StructType (held, so that the id stays its own)
        self._converters: dict[int, tuple[StructType, Callable[[Any], Any]]] = {}

    def spark_type(self) -> StructType:
        """The Spark type of the values: the schema (the state reader's column type)."""
        return self.schema

    def serialize(self, value: Any) -> bytes:
        if value is None:
            raise SerializationError("a record state holds records, not None (clear the state to remove its value)")
        return self._packer.pack(self._encode(value))

    def serialize_many(self, values: Iterable[Any]) -> list[bytes]:
        """With a packer of its own: snapshot writers call this on their thread while the task may
        call ``serialize`` (a msgpack ``Packer`` fills one buffer)."""
        pack, encode = msgpack.Packer(use_bin_type=True).pack, self._encode
        return [pack(encode(value)) if value is not None else self.serialize(value) for value in values]

    def deserialize(self, data: bytes) -> Any:
        try:
            encoded = _unpack(data)
        except Exception as exc:
            raise SerializationError(f"cannot decode {len(data)} bytes as a record: {exc}") from exc
        if not isinstance(encoded, list) or not encoded or encoded[0] != GENERATION \
                or len(encoded) != len(self.schema.fields) + 1:
            raise SerializationError(
                f"the {len(data)} bytes are no record of this schema ({self.schema.simpleString()}): a record of "
                f"generation {GENERATION} is an array of {len(self.schema.fields) + 1} items, got "
                f"{str(encoded)[:80]}")
        return self._decode_fields(encoded[1:])

    def resolve_compatibility(self, previous: SerializerSnapshot) -> Compatibility:
        """As is for the same schema; after migration for one that evolves into this one
        (``record_evolution``); else incompatible."""
        old = self._schema_of(previous)
        if old is None:
            return Compatibility.INCOMPATIBLE
        if old == self.schema:
            return Compatibility.COMPATIBLE_AS_IS
        try:
            self._converter(old)
        except Incompatible:
            return Compatibility.INCOMPATIBLE
        return Compatibility.COMPATIBLE_AFTER_MIGRATION

    def incompatibility(self, previous: SerializerSnapshot) -> str | None:
        old = self._schema_of(previous)
        if old is None:
            return None
        try:
            self._converter(old)
        except Incompatible as exc:
            return str(exc)
        return None

    def migrate(self, value: Any, previous: TypeSerializer) -> Any:
        if not isinstance(previous, RecordSerializer):
            return super().migrate(value, previous)
        return self._converter(previous.schema)(value)

    def _schema_of(self, previous: SerializerSnapshot) -> StructType | None:
        """The schema of a record serializer's snapshot (None: no record serializer's this one reads)."""
        if previous.identity != self.snapshot().identity or previous.version > self.VERSION:
            return None
        return StructType.fromJson(previous.config["schema"])

    def _converter(self, old: StructType) -> Callable[[Any], Any]:
        """From records of ``old``, built once per schema object (a migration passes the same one
        for every value)."""
        held = self._converters.get(id(old))
        if held is None or held[0] is not old:
            held = self._converters[id(old)] = (old, converter(old, self.schema, self._classes))
        return held[1]

    def decodes_like(self, other: TypeSerializer) -> bool:
        return self == other and getattr(other, "record_type", None) is self.record_type

    def config(self) -> dict[str, Any]:
        return {"schema": self.schema.jsonValue()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "RecordSerializer":
        return cls(StructType.fromJson(config["schema"]))

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema.jsonValue(), "record_type": self.record_type, "classes": self._classes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.schema = StructType.fromJson(state["schema"])
        self.record_type, self._classes = state["record_type"], state["classes"]
        self._build()
