"""Fields of a record as msgpack holds them, by Spark type, and back: the encoders and decoders
that ``RecordSerializer`` builds once per schema.

- boolean, tinyint..bigint (range-checked), float and double, string, binary: as msgpack has them;
- date: days since 1970-01-01; timestamp: microseconds since the epoch (an aware datetime);
  timestamp_ntz: microseconds of the wall-clock time (a naive datetime);
- decimal(p, s): the unscaled integer, for p > 18 as big-endian two's complement bytes;
- array, map: msgpack arrays and maps; a nested struct: an array of its fields;
- null only where the schema allows it; an error names the field (``where.lat``, ``trail[]``).
"""
from __future__ import annotations

import datetime
import decimal
import numbers
from collections.abc import Mapping
from typing import Any, Callable, Iterable

from pyspark.sql.types import (
    ArrayType, BinaryType, BooleanType, ByteType, DataType, DateType, DecimalType, DoubleType, FloatType, IntegerType,
    LongType, MapType, Row, ShortType, StringType, StructType, TimestampNTZType, TimestampType, _create_row,
)

from statekit.spi.errors import SerializationError

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_EPOCH_NTZ = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_DECIMAL_CONTEXT = decimal.Context(prec=80)  # exact for every decimal(38, s) scaling
_INTEGER_BITS = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}

Codec = Callable[[Any], Any]


def _wrong(path: str, expected: str, value: Any) -> SerializationError:
    if value is None:
        return SerializationError(f"field {path or '(the record)'} is NOT NULL in the schema, and got None")
    shown = repr(value)
    return SerializationError(f"field {path or '(the record)'}: expected {expected}, got {type(value).__name__} "
                              f"{shown[:80]}{'...' if len(shown) > 80 else ''}")


def field_encoder(data_type: DataType, nullable: bool, path: str) -> Codec:
    """The field's encoder; a NOT NULL field's refuses None as a value of the wrong type."""
    encode = _value_encoder(data_type, path)
    if not nullable:
        return encode
    return lambda value: None if value is None else encode(value)


#: Spark types whose values msgpack writes as they are when they have exactly this Python class
_EXACT_CLASS = {LongType: int, IntegerType: int, ShortType: int, ByteType: int, DoubleType: float,
                FloatType: float, StringType: str, BooleanType: bool}


def _value_encoder(data_type: DataType, path: str) -> Codec:  # noqa: C901 - one branch per Spark type
    kind = type(data_type)
    if kind in _INTEGER_BITS:
        bits = _INTEGER_BITS[kind]
        low, high, name = -(1 << (bits - 1)), (1 << (bits - 1)) - 1, data_type.simpleString()

        def integer(value: Any) -> int:
            if value.__class__ is not int:
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise _wrong(path, f"an int ({name})", value)
                value = int(value)
            if not low <= value <= high:
                raise _wrong(path, f"an int within {name}'s range [{low}, {high}]", value)
            return value
        return integer
    if kind in (DoubleType, FloatType):
        def floating(value: Any) -> float:
            if value.__class__ is float:
                return value
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise _wrong(path, "a float", value)
            return float(value)
        return floating
    if kind is BooleanType:
        def boolean(value: Any) -> bool:
            if value is True or value is False:
                return value
            raise _wrong(path, "a bool", value)
        return boolean
    if kind is StringType:
        def string(value: Any) -> str:
            if value.__class__ is str:
                return value
            if isinstance(value, str):
                return str(value)
            raise _wrong(path, "a str", value)
        return string
    if kind is BinaryType:
        def binary(value: Any) -> bytes:
            if isinstance(value, (bytes, bytearray, memoryview)):
                return bytes(value)
            raise _wrong(path, "bytes", value)
        return binary
    if kind is DateType:
        def date(value: Any) -> int:
            if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
                return value.toordinal() - _EPOCH_ORDINAL
            raise _wrong(path, "a datetime.date", value)
        return date
    if kind is TimestampType:
        def timestamp(value: Any) -> int:
            if isinstance(value, datetime.datetime) and value.tzinfo is not None:
                return (value - _EPOCH) // _MICROSECOND
            raise _wrong(path, "a datetime with a time zone (a timestamp is an instant; a naive datetime is a "
                               "timestamp_ntz)", value)
        return timestamp
    if kind is TimestampNTZType:
        def timestamp_ntz(value: Any) -> int:
            if isinstance(value, datetime.datetime) and value.tzinfo is None:
                return (value - _EPOCH_NTZ) // _MICROSECOND
            raise _wrong(path, "a naive datetime (timestamp_ntz)", value)
        return timestamp_ntz
    if kind is DecimalType:
        return _decimal_encoder(data_type, path)
    if kind is ArrayType:
        element = field_encoder(data_type.elementType, data_type.containsNull, f"{path}[]")
        exact = _EXACT_CLASS.get(type(data_type.elementType))
        bits = _INTEGER_BITS.get(type(data_type.elementType))
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if bits else (0, 0)

        def array(value: Any) -> list:
            if not isinstance(value, (list, tuple)):
                raise _wrong(path, "a list", value)
            # the common case at one check per element: elements of the exact class (in range)
            if exact is not None and (all(e.__class__ is exact and low <= e <= high for e in value) if bits
                                      else all(e.__class__ is exact for e in value)):
                return value if value.__class__ is list else list(value)
            return [element(e) for e in value]
        return array
    if kind is MapType:
        key = field_encoder(data_type.keyType, False, f"{path}{{key}}")
        item = field_encoder(data_type.valueType, data_type.valueContainsNull, f"{path}{{value}}")

        def mapping(value: Any) -> dict:
            if isinstance(value, Mapping):
                return {key(k): item(v) for k, v in value.items()}
            raise _wrong(path, "a dict", value)
        return mapping
    if kind is StructType:
        return struct_encoder(data_type, path)
    raise SerializationError(f"field {path}: Spark type {data_type.simpleString()} is not supported in a record")


def _decimal_encoder(data_type: DecimalType, path: str) -> Codec:
    precision, scale = data_type.precision, data_type.scale
    limit, name = 10 ** precision, data_type.simpleString()
    wide = precision > 18  # beyond 64 bits

    def encode(value: Any) -> int | bytes:
        if value.__class__ is not decimal.Decimal:
            if isinstance(value, bool) or not isinstance(value, (int, decimal.Decimal)):
                raise _wrong(path, f"a Decimal ({name})", value)
            value = decimal.Decimal(value)
        scaled = value.scaleb(scale, _DECIMAL_CONTEXT)
        unscaled = int(scaled) if scaled.is_finite() else None
        if unscaled is None or unscaled != scaled or not -limit < unscaled < limit:
            raise _wrong(path, f"a Decimal that {name} holds without rounding", value)
        if wide:
            return unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
        return unscaled
    return encode


def struct_encoder(struct: StructType, path: str) -> Codec:
    names = list(struct.names)
    prefix = f"{path}." if path else ""
    encoders = [field_encoder(f.dataType, f.nullable, prefix + f.name) for f in struct.fields]

    def fields_of(value: Any) -> Iterable[Any]:
        if isinstance(value, Row):
            fields = getattr(value, "__fields__", None)
            if fields is None or fields == names:
                if len(value) != len(names):
                    raise _wrong(path, f"a record of {len(names)} fields {names}", value)
                return value
            return [value[n] if n in fields else _missing(n) for n in names]
        if isinstance(value, Mapping):
            return [value[n] if n in value else _missing(n) for n in names]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            raise _wrong(path, f"a dataclass, Row, dict or object with fields {names} (a plain tuple has no names)",
                         value)
        try:
            return [getattr(value, n) for n in names]
        except AttributeError as exc:
            raise _wrong(path, f"a dataclass, Row, dict or object with fields {names} ({exc})", value) from None

    def _missing(name: str) -> Any:
        raise SerializationError(f"field {prefix}{name} is missing from the value")

    def encode(value: Any) -> list:
        return [encode_field(v) for encode_field, v in zip(encoders, fields_of(value))]
    return encode


def field_decoder(data_type: DataType, nullable: bool, path: str, classes: dict[str, type]) -> Codec | None:
    """None where msgpack's value is already the Python value; ``classes``: the dataclass a struct
    at a path decodes into (``record_classes``), else it decodes into a Row."""
    decode = _value_decoder(data_type, path, classes)
    if decode is None or not nullable:
        return decode
    return lambda value: None if value is None else decode(value)


def _value_decoder(data_type: DataType, path: str, classes: dict[str, type]) -> Codec | None:  # noqa: C901
    kind = type(data_type)
    if kind is DateType:
        return lambda days: datetime.date.fromordinal(days + _EPOCH_ORDINAL)
    if kind is TimestampType:
        return lambda micros: _EPOCH + datetime.timedelta(0, 0, micros)
    if kind is TimestampNTZType:
        return lambda micros: _EPOCH_NTZ + datetime.timedelta(0, 0, micros)
    if kind is DecimalType:
        scale = data_type.scale

        def decimal_value(unscaled: int | bytes) -> decimal.Decimal:
            if unscaled.__class__ is bytes:
                unscaled = int.from_bytes(unscaled, "big", signed=True)
            return decimal.Decimal(unscaled).scaleb(-scale, _DECIMAL_CONTEXT)
        return decimal_value
    if kind is ArrayType:
        element = field_decoder(data_type.elementType, data_type.containsNull, f"{path}[]", classes)
        return None if element is None else (lambda values: [element(e) for e in values])
    if kind is MapType:
        key = field_decoder(data_type.keyType, False, f"{path}{{key}}", classes)
        item = field_decoder(data_type.valueType, data_type.valueContainsNull, f"{path}{{value}}", classes)
        if key is None and item is None:
            return None
        key, item = key or (lambda k: k), item or (lambda v: v)
        return lambda values: {key(k): item(v) for k, v in values.items()}
    if kind is StructType:
        return struct_decoder(data_type, path, classes)
    return None


def struct_decoder(struct: StructType, path: str, classes: dict[str, type]) -> Codec:
    prefix = f"{path}." if path else ""
    decoders = [field_decoder(f.dataType, f.nullable, prefix + f.name, classes) for f in struct.fields]
    steps = [(i, d) for i, d in enumerate(decoders) if d is not None]
    names = list(struct.names)
    record_type = classes.get(path)

    def values_of(encoded: list) -> list:
        for i, decode in steps:
            encoded[i] = decode(encoded[i])
        return encoded

    if record_type is not None:
        return lambda encoded: record_type(*values_of(encoded))
    return lambda encoded: _create_row(names, values_of(encoded))
