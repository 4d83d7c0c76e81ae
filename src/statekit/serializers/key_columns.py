"""The keys of a job keyed by columns: one column's value, or a tuple of several, written by their
Spark types (``KeyColumnsSerializer(["string", "bigint"])``) as ``record_codec`` writes a record's
fields, in one msgpack item (one column) or array (several).

A key comes back as the same Python value the job keyed by (what Arrow gives for the column: an
aware datetime for a timestamp, a ``Decimal`` of the column's scale, ...), and reading it runs no
code. Keys are not migrated: a change of the key columns' types is refused on restore, as the key
groups they hash to would change too.
"""
from __future__ import annotations

from typing import Any, Sequence

import msgpack
from pyspark.sql.types import (
    BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType, DoubleType, FloatType, IntegerType, LongType,
    ShortType, StringType, TimestampNTZType, TimestampType,
)

from statekit.serializers.record_codec import field_decoder, field_encoder
from statekit.spi.errors import ConfigurationError, SerializationError
from statekit.spi.key_groups import SUPPORTED_KEY_TYPES, decimal_type
from statekit.spi.serializer import TypeSerializer

_TYPES: dict[str, DataType] = {
    "string": StringType(), "binary": BinaryType(), "int": IntegerType(), "bigint": LongType(),
    "smallint": ShortType(), "tinyint": ByteType(), "boolean": BooleanType(), "float": FloatType(),
    "double": DoubleType(), "date": DateType(), "timestamp": TimestampType(), "timestamp_ntz": TimestampNTZType(),
}


def _data_type(name: str) -> DataType:
    decimal = decimal_type(name)
    if decimal is not None:
        return DecimalType(*decimal)
    try:
        return _TYPES[name]
    except KeyError:
        raise ConfigurationError(f"key column type {name!r} is not a key type; supported: "
                                 f"{', '.join(SUPPORTED_KEY_TYPES)}") from None


class KeyColumnsSerializer(TypeSerializer[Any]):
    """Keys of columns of ``types`` (Spark's simple type names); see the module."""

    def __init__(self, types: Sequence[str]) -> None:
        if not types:
            raise ConfigurationError("KeyColumnsSerializer needs the key columns' types, one at least")
        self.types = tuple(types)
        data_types = [_data_type(t) for t in self.types]
        self._encoders = [field_encoder(t, True, f"key[{i}]") for i, t in enumerate(data_types)]
        self._decoders = [field_decoder(t, True, f"key[{i}]", {}) or _same for i, t in enumerate(data_types)]
        self._packer = msgpack.Packer(use_bin_type=True)

    def serialize(self, value: Any) -> bytes:
        try:
            if len(self._encoders) == 1:
                return self._packer.pack(self._encoders[0](value))
            if not isinstance(value, tuple) or len(value) != len(self._encoders):
                raise SerializationError(f"a key of columns of types {list(self.types)} is a tuple of "
                                         f"{len(self.types)} values, got {value!r}")
            return self._packer.pack([encode(v) for encode, v in zip(self._encoders, value)])
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(f"cannot write key {value!r} as columns of types {list(self.types)}: "
                                     f"{exc}") from exc

    def deserialize(self, data: bytes) -> Any:
        try:
            encoded = msgpack.unpackb(data, raw=False)
            if len(self._decoders) == 1:
                return self._decoders[0](encoded)
            return tuple(decode(v) for decode, v in zip(self._decoders, encoded))
        except (TypeError, ValueError, OverflowError, msgpack.ExtraData) as exc:
            raise SerializationError(f"cannot read {len(data)} bytes as a key of columns of types "
                                     f"{list(self.types)}: {exc}") from exc

    def config(self) -> dict[str, Any]:
        return {"types": list(self.types)}

    def __getstate__(self) -> dict[str, Any]:
        return {"types": self.types}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["types"])  # type: ignore[misc]


def _same(value: Any) -> Any:
    return value
