"""The Spark schema of a record: from a ``StructType``, a DDL string or a dataclass's type hints.

A dataclass field's hint maps to a Spark type as PySpark infers one from a Python value: ``int``
-> bigint, ``float`` -> double, ``str`` -> string, ``bytes`` -> binary, ``bool`` -> boolean,
``datetime.datetime`` -> timestamp, ``datetime.date`` -> date, ``decimal.Decimal`` ->
decimal(38,18), ``list[T]`` (or ``tuple[T, ...]``) -> array, ``dict[K, V]`` -> map, a nested
dataclass -> struct. ``Optional[T]`` (``T | None``) makes a field nullable; every other field is
NOT NULL. Other hints are refused, naming the field.
"""
from __future__ import annotations

import dataclasses
import datetime
import decimal
import types
import typing
from typing import Any

from pyspark.sql.types import (
    ArrayType, BinaryType, BooleanType, DataType, DateType, DecimalType, DoubleType, LongType, MapType, StringType,
    StructField, StructType, TimestampType,
)

from statekit.spi.errors import ConfigurationError

_ATOMIC: dict[Any, DataType] = {
    int: LongType(), float: DoubleType(), str: StringType(), bytes: BinaryType(), bool: BooleanType(),
    datetime.datetime: TimestampType(), datetime.date: DateType(), decimal.Decimal: DecimalType(38, 18),
}


def struct_of(schema: StructType | str | type) -> StructType:
    """The schema a record serializer takes: a ``StructType``, a DDL string (parsed by the active
    SparkSession) or a dataclass."""
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        try:
            return StructType.fromDDL(schema)
        except Exception as exc:  # noqa: BLE001 - PySpark's parse error, or no active session
            raise ConfigurationError(f"cannot parse the record schema {schema!r} ({exc}); pass a valid DDL string "
                                     f"while a SparkSession is active, or a StructType or a dataclass") from exc
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        return _dataclass_struct(schema, schema.__name__)
    raise ConfigurationError(f"a record schema is a StructType, a DDL string or a dataclass, not {schema!r}")


def _dataclass_struct(cls: type, path: str) -> StructType:
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # noqa: BLE001 - a hint that does not resolve
        raise ConfigurationError(f"the type hints of dataclass {cls.__qualname__} do not resolve: {exc}") from exc
    fields = []
    for field in dataclasses.fields(cls):
        hint, nullable = _optional(hints[field.name])
        fields.append(StructField(field.name, _spark_type(hint, f"{path}.{field.name}"), nullable))
    return StructType(fields)


def _optional(hint: Any) -> tuple[Any, bool]:
    """``hint`` without ``None`` in a union, and whether ``None`` was there."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) == 1:
            return members[0], len(members) != len(typing.get_args(hint))
    return hint, False


def _spark_type(hint: Any, path: str) -> DataType:
    if hint in _ATOMIC:
        return _ATOMIC[hint]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_struct(hint, path)
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and len(arguments) == 1 or origin is tuple and len(arguments) == 2 and arguments[1] is ...:
        element, nullable = _optional(arguments[0])
        return ArrayType(_spark_type(element, f"{path}[]"), nullable)
    if origin is dict and len(arguments) == 2:
        value, nullable = _optional(arguments[1])
        return MapType(_spark_type(arguments[0], f"{path}{{key}}"), _spark_type(value, f"{path}{{value}}"), nullable)
    raise ConfigurationError(
        f"field {path} has type {hint!r}, which has no Spark type: use int, float, str, bytes, bool, datetime, "
        f"date, Decimal, list[T], dict[K, V], a nested dataclass, or Optional of one")


def record_classes(cls: type | None) -> dict[str, type]:
    """The dataclass of each struct in dataclass ``cls``'s values, by its path (``""`` for ``cls``,
    ``where``, ``trail[]``, ``per_page{value}``, ...): structs at those paths decode into them.
    Found once from the type hints, which may not resolve where the serializer is unpickled."""
    found: dict[str, type] = {}

    def walk(hint: Any, path: str) -> None:
        hint = _optional(hint)[0]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            found[path] = hint
            hints = typing.get_type_hints(hint)
            for field in dataclasses.fields(hint):
                walk(hints[field.name], f"{path}.{field.name}" if path else field.name)
            return
        arguments = typing.get_args(hint)
        if typing.get_origin(hint) in (list, tuple) and arguments:
            walk(arguments[0], f"{path}[]")
        elif typing.get_origin(hint) is dict and len(arguments) == 2:
            walk(arguments[1], f"{path}{{value}}")

    if cls is not None:
        walk(cls, "")
    return found
