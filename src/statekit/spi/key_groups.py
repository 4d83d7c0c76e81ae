"""Key groups: the unit of state partitioning and rescaling.

The assignment is decided and must stay exact:

* key group  = pmod(xxhash64(key columns, seed 42), max_parallelism), identical to Spark SQL's
  ``pmod(xxhash64(cols...), maxP)`` so the engine can compute it in the JVM;
* subtask i of p owns ``[(i*maxP + p - 1) // p, ((i+1)*maxP - 1) // p]`` (Flink's formula);
* key group kg belongs to subtask ``kg * p // maxP``.

Under Spark the key group is computed in the JVM; this Python reference serves the local runner
and tests. A ``datetime`` without a time zone is taken as UTC here, whereas PySpark converts it
with the session time zone: use aware datetimes (or a UTC session) for timestamp keys.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import functools
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import xxhash

from statekit.spi.errors import ConfigurationError

SPARK_HASH_SEED = 42
#: Flink's bounds for the number of key groups.
LOWER_BOUND_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 32768  # 2 ** 15; also what a 2-byte key-group prefix can hold

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH_TS = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_NTZ = _dt.datetime(1970, 1, 1)
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_FLOAT32 = struct.Struct("<f")
_FLOAT64 = struct.Struct("<d")

#: Spark SQL type names the Python reference hashes exactly like Spark's ``xxhash64`` (and
#: ``decimal(p,s)``; a null of any type, ``void`` when it is the type inferred for ``None``).
SUPPORTED_KEY_TYPES = ("string", "binary", "int", "bigint", "smallint", "tinyint", "boolean",
                       "float", "double", "date", "timestamp", "timestamp_ntz", "decimal(p,s)")
#: the type PySpark's ``createDataFrame`` infers for a ``decimal.Decimal``
INFERRED_DECIMAL = "decimal(38,18)"
_DECIMAL_TYPE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
#: Spark's ``Decimal.MAX_LONG_DIGITS``: decimals of up to this precision hash as their unscaled long
_MAX_LONG_DIGITS = 18
#: wide enough for any decimal Spark holds (38 digits) scaled by any scale, unrounded
_EXACT = decimal.Context(prec=200, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_RANGES = {"bigint": 64, "int": 32, "smallint": 16, "tinyint": 8}


def default_max_parallelism(parallelism: int) -> int:
    """Flink's default number of key groups for an operator of the given parallelism."""
    check_parallelism(parallelism)
    target = parallelism + parallelism // 2
    rounded = 1 << max(target - 1, 0).bit_length()
    return min(max(rounded, LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def check_parallelism(parallelism: int, max_parallelism: int | None = None) -> None:
    if not isinstance(parallelism, int) or parallelism < 1:
        raise ConfigurationError(f"parallelism must be a positive integer, got {parallelism!r}")
    if max_parallelism is None:
        return
    if not isinstance(max_parallelism, int) or not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ConfigurationError(
            f"max parallelism must be an integer in [1, {UPPER_BOUND_MAX_PARALLELISM}], got {max_parallelism!r}")
    if parallelism > max_parallelism:
        raise ConfigurationError(
            f"parallelism {parallelism} exceeds max parallelism {max_parallelism}: every subtask needs at "
            f"least one key group; raise max parallelism or lower parallelism")


def infer_key_type(value: Any) -> str:
    """The Spark SQL type a Python value gets by default (how ``createDataFrame`` infers it)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    if isinstance(value, _dt.datetime):
        return "timestamp"
    if isinstance(value, _dt.date):
        return "date"
    if isinstance(value, decimal.Decimal):
        return INFERRED_DECIMAL
    if value is None:  # a null: Spark's hash skips it, whatever the column's type
        return "void"
    raise ConfigurationError(
        f"cannot hash a key of type {type(value).__name__}; key columns must be one of "
        f"{', '.join(SUPPORTED_KEY_TYPES)} (or None, a null)")


@functools.lru_cache(maxsize=64)
def decimal_type(type_name: str) -> tuple[int, int] | None:
    """(precision, scale) of a Spark ``decimal(p,s)`` type name; None for any other type."""
    match = _DECIMAL_TYPE.match(type_name)
    if match is None:
        return None
    precision, scale = int(match.group(1)), int(match.group(2))
    if not 1 <= precision <= 38 or scale > precision:
        raise ConfigurationError(f"key type {type_name!r}: Spark's decimals have a precision from 1 to 38 and a scale "
                                 f"of at most the precision")
    return precision, scale


def unscaled_decimal(value: Any, type_name: str) -> int:
    """The unscaled integer of a key ``value`` in a column of decimal type ``type_name``, as Spark holds
    it; a ``ConfigurationError`` if the value is no finite ``Decimal`` that the type holds exactly."""
    precision, scale = decimal_type(type_name)  # type: ignore[misc]
    if not isinstance(value, decimal.Decimal) or not value.is_finite():
        raise ConfigurationError(f"key {value!r} ({type(value).__name__}) is not a value of key type {type_name!r}: "
                                 f"give a finite decimal.Decimal")
    scaled = value.scaleb(scale, context=_EXACT)
    unscaled = int(scaled)
    if scaled != unscaled or abs(unscaled) >= 10 ** precision:
        raise ConfigurationError(
            f"key {value!r} does not fit key type {type_name!r} ({precision} digits, {scale} after the point) "
            f"exactly, as a Spark column of that type holds it: round it (value.quantize(...)), or give key_types "
            f"a decimal(p,s) that holds it (PySpark infers {INFERRED_DECIMAL} for a Decimal)")
    return unscaled


def _float32_bytes(value: float) -> bytes:
    """The bytes Spark hashes for a FloatType value: the Python float rounded to float32 as Java's
    ``(float)`` cast does (overflow gives +-inf, underflow +-0.0), then -0.0 as 0.0 and every NaN
    as the canonical NaN (``Float.floatToIntBits``)."""
    if math.isnan(value):
        return _INT32.pack(0x7FC00000)
    try:
        data = _FLOAT32.pack(value)
    except OverflowError:  # finite, but rounds past the largest float32
        data = _FLOAT32.pack(math.copysign(math.inf, value))
    return _INT32.pack(0) if _FLOAT32.unpack(data)[0] == 0.0 else data


def _hash_one(value: Any, type_name: str, seed: int) -> int:
    """xxhash64 of one column value, exactly as Spark's ``XxHash64Function`` (unsigned result)."""
    if value is None:  # Spark skips nulls: the running hash is unchanged
        return seed
    if type_name == "string":
        data = value.encode("utf-8")
    elif type_name == "binary":
        data = bytes(value)
    elif type_name in ("int", "smallint", "tinyint"):
        data = _INT32.pack(value)
    elif type_name == "boolean":
        data = _INT32.pack(1 if value else 0)
    elif type_name == "bigint":
        data = _INT64.pack(value)
    elif type_name == "float":
        data = _float32_bytes(value)
    elif type_name == "double":
        data = _INT64.pack(0) if value == 0.0 else _FLOAT64.pack(value)
        if math.isnan(value):
            data = _INT64.pack(0x7FF8000000000000)
    elif type_name == "date":
        data = _INT32.pack((value - _EPOCH_DATE).days)
    elif type_name == "timestamp":
        ts = value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
        delta = ts - _EPOCH_TS
        data = _INT64.pack((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)
    elif type_name == "timestamp_ntz":  # the wall-clock time as microseconds from 1970-01-01 00:00
        delta = value.replace(tzinfo=None) - _EPOCH_NTZ
        data = _INT64.pack((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)
    elif decimal_type(type_name) is not None:  # Spark's HashExpression of a DecimalType
        unscaled = unscaled_decimal(value, type_name)
        if decimal_type(type_name)[0] <= _MAX_LONG_DIGITS:  # type: ignore[index]
            data = _INT64.pack(unscaled)
        else:  # BigInteger.toByteArray: big-endian two's complement, fewest bytes with the sign bit
            data = unscaled.to_bytes((unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1, "big",
                                     signed=True)
    else:
        raise ConfigurationError(
            f"unsupported key type {type_name!r}; supported: {', '.join(SUPPORTED_KEY_TYPES)}")
    return xxhash.xxh64_intdigest(data, seed)


def spark_xxhash64(values: Sequence[Any], types: Sequence[str] | None = None) -> int:
    """Spark SQL ``xxhash64(col1, col2, ...)`` as a signed 64-bit integer.

    ``types`` are Spark SQL type names per column; inferred from the Python values when omitted
    (Python ``int`` is ``bigint``, as Spark infers it). Several columns chain the seed.
    """
    if types is None:
        types = [infer_key_type(v) for v in values]
    elif len(types) != len(values):
        raise ConfigurationError(f"{len(values)} key values but {len(types)} key types")
    h = SPARK_HASH_SEED
    try:
        for value, type_name in zip(values, types):
            h = _hash_one(value, type_name, h)
    except (struct.error, UnicodeEncodeError, AttributeError, TypeError, OverflowError, ValueError) as exc:
        if isinstance(exc, ConfigurationError):
            raise
        raise _not_a_key(value, type_name, exc) from None
    return h - (1 << 64) if h >= 1 << 63 else h


def _not_a_key(value: Any, type_name: str, exc: Exception) -> ConfigurationError:
    """Why ``value`` is no key of a column of ``type_name`` (Spark would not hold it there)."""
    if isinstance(value, int) and type_name in _RANGES:
        bits = _RANGES[type_name]
        return ConfigurationError(
            f"key {value!r} is outside the range of a {type_name} key column, from {-(1 << bits - 1)} to "
            f"{(1 << bits - 1) - 1}, and Spark has no wider integer type: key by a decimal.Decimal (a decimal(38,0) "
            f"column) or a string of it{'' if type_name == 'bigint' else ', or key_types bigint'}")
    if isinstance(exc, UnicodeEncodeError):
        return ConfigurationError(
            f"key {value!r} is not valid Unicode text ({exc.reason}: {value[exc.start:exc.end]!r} at {exc.start}), "
            f"which a Spark string (UTF-8) cannot hold: fix the text, or key by its bytes "
            f"(key.encode('utf-8', 'surrogatepass') with key_types binary)")
    return ConfigurationError(
        f"key {value!r} ({type(value).__name__}) is not a value of key type {type_name!r}: give keys of that type, or "
        f"key types that match them (a Python int is a bigint, a str a string; LocalRunner's key_types)")


#: the NaN every NaN key becomes: one object, so that it is one key in a dict too (NaN != NaN)
CANONICAL_NAN = float("nan")


def canonical_key(key: Any) -> Any:
    """``key`` as state holds it: a float -0.0 as 0.0 and every NaN as ``CANONICAL_NAN`` (in a tuple
    key too). Spark's grouping and ``key_group_for_key`` treat them as one key already; this makes
    them one key in every backend (a dict merges -0.0 with 0.0 but not two NaNs; stored bytes
    keep -0.0 apart from 0.0)."""
    if isinstance(key, float):
        return _canonical_float(key)
    if isinstance(key, tuple) and any(isinstance(part, float) for part in key):
        return tuple(_canonical_float(part) if isinstance(part, float) else part for part in key)
    return key


def spark_key(key: Any, types: Sequence[str] | None = None) -> Any:
    """``key`` as Spark hands it to a function: ``canonical_key``, and each ``Decimal`` at the scale
    of its column's type (``types``, or the ``decimal(38,18)`` PySpark infers), so that equal
    decimals are one key in every backend (``Decimal('1.5')`` and ``Decimal('1.50')`` serialize apart)."""
    cls = key.__class__
    if cls is str or cls is int:  # the usual keys, first
        return key
    key = canonical_key(key)
    if isinstance(key, decimal.Decimal):
        return _scaled(key, types[0] if types else INFERRED_DECIMAL)
    if isinstance(key, tuple) and any(isinstance(part, decimal.Decimal) for part in key):
        return tuple(_scaled(part, types[i] if types else INFERRED_DECIMAL) if isinstance(part, decimal.Decimal)
                     else part for i, part in enumerate(key))
    return key


def _scaled(value: decimal.Decimal, type_name: str) -> decimal.Decimal:
    """``value`` at the scale of ``type_name`` (a decimal type; another type is left to the hash to refuse)."""
    scale = decimal_type(type_name)
    if scale is None:
        return value
    return decimal.Decimal(unscaled_decimal(value, type_name)).scaleb(-scale[1], context=_EXACT)


def _canonical_float(value: float) -> float:
    if value != value:
        return CANONICAL_NAN
    return 0.0 if value == 0.0 else value


def key_group_for_key(key: Any, max_parallelism: int, types: Sequence[str] | None = None) -> int:
    """The key group of a key: a scalar is one column, a tuple is several columns."""
    values = key if isinstance(key, tuple) else (key,)
    return spark_xxhash64(values, types) % max_parallelism  # Python's % on a positive modulus is pmod


#: how keys of one plain class and type are hashed without looking at each (``key_groups_for_keys``)
_PLAIN_BYTES = {(str, "string"): str.encode, (int, "bigint"): _INT64.pack, (int, "int"): _INT32.pack}


def key_groups_for_keys(keys: Sequence[Any], max_parallelism: int, types: Sequence[str] | None = None) -> list[int]:
    """``key_group_for_key`` of each key; keys that are all strings, or all integers (bigint, or
    int where ``types`` say so), are hashed in one pass (15x faster than key by key)."""
    classes = set(map(type, keys))
    if len(classes) == 1 and (types is None or len(types) == 1):
        cls = next(iter(classes))
        to_bytes = _PLAIN_BYTES.get((cls, types[0] if types else "string" if cls is str else "bigint"))
        if to_bytes is not None:
            hash_of, seed, wrap = xxhash.xxh64_intdigest, SPARK_HASH_SEED, 1 << 64
            # the signed hash's pmod (Spark's), as spark_xxhash64 and key_group_for_key compute it
            return [(h - wrap if h >> 63 else h) % max_parallelism
                    for h in (hash_of(to_bytes(key), seed) for key in keys)]
    return [key_group_for_key(key, max_parallelism, types) for key in keys]


def key_groups_of_types(types: Sequence[str], max_parallelism: int) -> Callable[[Sequence[Any]], list[int]] | None:
    """The key groups of keys of columns of ``types`` as Spark computes them (a restore checks the
    key groups its index claims with it: ``KeyedBackendParams.key_groups_of``), or None when a type
    is one this reference does not hash (then nothing is checked)."""
    if not types or any(t not in SUPPORTED_KEY_TYPES and decimal_type(t) is None for t in types):
        return None
    fixed = tuple(types)
    return lambda keys: key_groups_for_keys(keys, max_parallelism, fixed)


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask that owns a key group (Flink's ``computeOperatorIndexForKeyGroup``)."""
    return key_group * parallelism // max_parallelism


@dataclass(frozen=True, order=True)
class KeyGroupRange:
    """An inclusive range of key groups ``[start, end]``; ``end < start`` is the empty range."""

    start: int
    end: int

    @classmethod
    def of_subtask(cls, max_parallelism: int, parallelism: int, subtask_index: int) -> "KeyGroupRange":
        """The key groups subtask ``subtask_index`` of ``parallelism`` owns (Flink's formula)."""
        check_parallelism(parallelism, max_parallelism)
        if not 0 <= subtask_index < parallelism:
            raise ConfigurationError(f"subtask index {subtask_index} outside [0, {parallelism})")
        start = (subtask_index * max_parallelism + parallelism - 1) // parallelism
        end = ((subtask_index + 1) * max_parallelism - 1) // parallelism
        return cls(start, end)

    @classmethod
    def empty(cls) -> "KeyGroupRange":
        return cls(0, -1)

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def intersection(self, other: "KeyGroupRange") -> "KeyGroupRange":
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange.empty()

    def intersects(self, other: "KeyGroupRange") -> bool:
        return len(self.intersection(other)) > 0

    def to_json(self) -> list[int]:
        return [self.start, self.end]

    @classmethod
    def from_json(cls, data: Sequence[int]) -> "KeyGroupRange":
        return cls(int(data[0]), int(data[1]))

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"
