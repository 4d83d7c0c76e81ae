"""How a record written with one schema becomes a record of another (state schema evolution).

Fields are matched by name, so they may be reordered. A field the new schema adds takes its
dataclass default (or ``default_factory``), else None where it is nullable; one it removes is
dropped. A type may widen: tinyint -> smallint -> int -> bigint, any of them -> double, float ->
double; a nullable field may become NOT NULL where it has a default (a null becomes the default).
Nested records, array elements and map values evolve by the same rules; map keys do not change.
Anything else is refused, naming the field and both types (``Incompatible``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from pyspark.sql.types import (
    ArrayType, ByteType, DataType, DoubleType, FloatType, IntegerType, LongType, MapType, Row, ShortType, StructType,
    _create_row,
)

#: from each type to the types it widens to
_WIDENS = {ByteType: (ShortType, IntegerType, LongType, DoubleType), ShortType: (IntegerType, LongType, DoubleType),
           IntegerType: (LongType, DoubleType), LongType: (DoubleType,), FloatType: (DoubleType,)}
_MISSING = object()  # a field the old record does not have

Convert = Callable[[Any], Any]


class Incompatible(Exception):
    """The reason a record of the old schema cannot become one of the new."""


def converter(old: StructType, new: StructType, classes: dict[str, type]) -> Convert:
    """A function from a record read with ``old`` (a Row, a dict, a dataclass or any object with
    the fields as attributes) to the same record in ``new``, built as ``classes`` says (the
    dataclass of a struct at a path, else a Row); raises ``Incompatible`` when there is none."""
    return _struct(old, new, "", classes)


def _convert(old: DataType, new: DataType, path: str, classes: dict[str, type]) -> Convert | None:
    """None where the value stays as it is."""
    if isinstance(old, StructType) and isinstance(new, StructType):
        return _struct(old, new, path, classes)
    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        if old.containsNull and not new.containsNull:
            raise Incompatible(f"field {path}: its elements may be null, and {new.simpleString()} has none")
        element = _convert(old.elementType, new.elementType, f"{path}[]", classes)
        return None if element is None else (lambda values: [element(v) for v in values])
    if isinstance(old, MapType) and isinstance(new, MapType):
        if old.keyType != new.keyType:
            raise Incompatible(f"field {path}: map keys were {old.keyType.simpleString()} and are "
                               f"{new.keyType.simpleString()}; map keys never change")
        if old.valueContainsNull and not new.valueContainsNull:
            raise Incompatible(f"field {path}: its values may be null, and {new.simpleString()} has none")
        item = _convert(old.valueType, new.valueType, f"{path}{{value}}", classes)
        return None if item is None else (lambda values: {k: item(v) for k, v in values.items()})
    if old == new:
        return None
    if type(new) in _WIDENS.get(type(old), ()):
        return float if isinstance(new, DoubleType) else None
    raise Incompatible(f"field {path or '(the record)'} was {old.simpleString()} and is {new.simpleString()}, which "
                       f"holds not every value it held")


def _struct(old: StructType, new: StructType, path: str, classes: dict[str, type]) -> Convert:
    prefix = f"{path}." if path else ""
    record_type = classes.get(path)
    defaults = _defaults(record_type)
    previous = {f.name: f for f in old.fields}
    #: per new field: its name, how an old value converts, what a missing value becomes and what a
    #: null becomes (functions giving the default; None: a null stays null)
    steps: list[tuple[str, Convert | None, Callable[[], Any], Callable[[], Any] | None]] = []
    for field in new.fields:
        where = prefix + field.name
        default = defaults.get(field.name) or (_none if field.nullable else None)
        was = previous.get(field.name)
        if default is None and (was is None or was.nullable and not field.nullable):
            raise Incompatible(
                f"field {where} ({field.dataType.simpleString()} NOT NULL) was added without a default: give it "
                f"one, or make it nullable" if was is None else
                f"field {where} was nullable and is NOT NULL without a default for its nulls")
        step = None if was is None else _convert(was.dataType, field.dataType, where, classes)
        steps.append((field.name, step, default or _none, None if field.nullable else default))
    names = list(new.names)

    def convert(value: Any) -> Any:
        values = []
        for name, step, when_missing, when_null in steps:
            item = _field(value, name)
            if item is _MISSING:
                item = when_missing()
            elif item is None:
                item = when_null() if when_null is not None else None
            elif step is not None:
                item = step(item)
            values.append(item)
        return record_type(*values) if record_type is not None else _create_row(names, values)
    return convert


def _none() -> None:
    return None


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Row):
        return value[name] if name in getattr(value, "__fields__", ()) else _MISSING
    if isinstance(value, dict):
        return value.get(name, _MISSING)
    return getattr(value, name, _MISSING)


def _defaults(record_type: type | None) -> dict[str, Callable[[], Any]]:
    """A dataclass's field defaults, as functions that give them (a factory is called per record)."""
    if record_type is None:
        return {}
    found: dict[str, Callable[[], Any]] = {}
    for field in dataclasses.fields(record_type):
        if not _missing(field.default):
            found[field.name] = lambda value=field.default: value
        elif not _missing(field.default_factory):
            found[field.name] = field.default_factory
    return found


def _missing(value: Any) -> bool:
    """``dataclasses.MISSING``, or a copy of it: a dataclass pickled by value (cloudpickle, as
    Spark ships a driver's classes to executors) brings its fields' MISSING as a new object."""
    return isinstance(value, type(dataclasses.MISSING))
