"""What a keyed job's input must be: key columns, and every other column that reaches Spark's
``mapInArrow``, named without dots or backticks (which it cannot take); key columns of types whose
values are keys (atomic: strings, numbers, booleans, dates, timestamps, binary, decimals; not
arrays, maps, structs or variants, which are not hashable; strings of the binary collation, the
one under which equal strings are equal bytes)."""
from __future__ import annotations

from typing import Iterable, Sequence

from pyspark.sql.types import ArrayType, MapType, StringType, StructType, VariantType

from statekit.spi.errors import ConfigurationError

_NESTED_TYPES = (ArrayType, MapType, StructType, VariantType)
#: the collation under which equal strings are equal bytes
BINARY_COLLATION = "UTF8_BINARY"
#: Spark SQL key types that hash alike (Spark's xxhash64 of an int) and give equal Python keys
_HASHED_AS = {"tinyint": "int", "smallint": "int"}


def key_hash_types(types: Sequence[str]) -> list[str]:
    """Key column types as they hash: two keys of equal values hash to the same key group when
    their types' ``key_hash_types`` are equal."""
    return [_HASHED_AS.get(t, t) for t in types]


def key_columns_of(schema: StructType, keys: str | Sequence[str]) -> tuple[str, ...]:
    """The key columns ``keys`` names, or a ``ConfigurationError`` naming what is wrong with them.
    The other columns' names are the caller's to check: those that reach ``mapInArrow``."""
    key_columns = (keys,) if isinstance(keys, str) else tuple(keys)
    missing = [c for c in key_columns if c not in schema.names]
    if not key_columns or missing:
        raise ConfigurationError(f"key columns {missing or list(key_columns)} are not columns of the "
                                 f"DataFrame ({schema.names})")
    check_column_names(key_columns, "the DataFrame")
    for name in key_columns:
        data_type = schema[name].dataType
        if isinstance(data_type, _NESTED_TYPES):
            raise ConfigurationError(
                f"key column {name!r} is {data_type.simpleString()}: a key must be an atomic value (a string, "
                f"number, boolean, date, timestamp, binary or decimal); key by its parts as several key columns "
                f"(e.g. a struct's fields), or by a string made of it (F.to_json)")
        if isinstance(data_type, StringType) and data_type.collation != BINARY_COLLATION:
            raise ConfigurationError(
                f"key column {name!r} is {data_type.simpleString()}: keys are compared (and hashed to key groups) "
                f"byte by byte, so strings equal under the collation would be different keys, unlike in Spark's "
                f"groupBy; key by F.collate({name!r}, '{BINARY_COLLATION}'), or by a normalized string (F.lower)")
    return key_columns


def check_column_names(names: Iterable[str], what: str) -> None:
    """A ``ConfigurationError`` if a name holds a dot or a backtick: PySpark's ``mapInArrow`` reads
    ``a.b`` as field ``b`` of a column ``a`` and fails to resolve it."""
    bad = [name for name in names if "." in name or "`" in name]
    if bad:
        raise ConfigurationError(f"columns {bad} of {what} have a dot or a backtick in their names, which Spark's "
                                 f"mapInArrow cannot take: rename them (e.g. df.withColumnRenamed({bad[0]!r}, "
                                 f"{bad[0].replace('.', '_').replace('`', '')!r}))")
