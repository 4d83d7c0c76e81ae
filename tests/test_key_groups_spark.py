"""The Python reference of the key-group assignment agrees with Spark SQL, row by row.

statekit computes ``pmod(xxhash64(key columns), max_parallelism)`` in the JVM when it plans a
job and in Python (``statekit.spi.key_groups``) wherever there is no Spark; the two must never
disagree, or state would be read from the wrong key group after a restore or a rescale.
"""
from __future__ import annotations

import datetime as dt
import decimal
import math
import random
import struct
from typing import Any, Callable, Sequence

import pytest

from statekit.spi.key_groups import decimal_type, key_group_for_key, spark_xxhash64

pytestmark = pytest.mark.spark

MAX_PARALLELISMS = (128, 77, 1000)
ROWS = 2500
UTC = dt.timezone.utc

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
FLOAT32_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]


# --------------------------------------------------------------------------- value generators

def _code_point(rng: random.Random) -> str:
    ranges = [(0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x2FF), (0x370, 0x52F), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF), (0x10000, 0x10FFFF), (0xE000, 0xFFFD)]
    lo, hi = rng.choice(ranges)
    cp = rng.randint(lo, hi)
    if 0xD800 <= cp <= 0xDFFF:  # lone surrogates are not valid UTF-8
        cp = 0x41
    return chr(cp)


def _strings(rng: random.Random) -> list[Any]:
    fixed = ["", " ", "a", "A", "\x00", "\x00\x00", "é", "e\u0301", "日本語", "😀", "👩‍👩‍👧",
             "null", "NULL", "x" * 31, "x" * 32, "x" * 33, "ä" * 1000, "😀" * 2500, None, None]
    out: list[Any] = list(fixed)
    while len(out) < ROWS:
        n = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, rng.randint(0, 200)])
        if rng.random() < 0.01:
            n = rng.randint(1000, 10000)  # long strings
        out.append("".join(_code_point(rng) for _ in range(n)))
    return out


def _binaries(rng: random.Random) -> list[Any]:
    fixed = [b"", b"\x00", b"\xff" * 8, bytes(range(256)), b"\x00" * 1000, None, None]
    out: list[Any] = list(fixed)
    while len(out) < ROWS:
        n = rng.choice([0, 1, 3, 4, 5, 8, 16, 31, 32, 33, rng.randint(0, 300)])
        if rng.random() < 0.01:
            n = rng.randint(1000, 8000)
        out.append(bytes(rng.getrandbits(8) for _ in range(n)))
    return out


def _ints(lo: int, hi: int) -> Callable[[random.Random], list[Any]]:
    def gen(rng: random.Random) -> list[Any]:
        out: list[Any] = [lo, hi, lo + 1, hi - 1, 0, 1, -1, None, None]
        if hi - lo < ROWS:
            out += list(range(lo, hi + 1))  # every value of tinyint
        while len(out) < ROWS:
            bits = rng.randint(1, (hi - lo).bit_length())  # spread over all magnitudes
            v = rng.getrandbits(bits) * rng.choice((1, -1))
            out.append(min(max(v, lo), hi))
        return out
    return gen


def _booleans(rng: random.Random) -> list[Any]:
    return [True, False, None] + [rng.choice((True, False, None)) for _ in range(ROWS - 3)]


def _floats(rng: random.Random) -> list[Any]:
    tiny = struct.unpack("<f", struct.pack("<I", 1))[0]  # smallest subnormal
    fixed = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, FLOAT32_MAX, -FLOAT32_MAX,
             tiny, -tiny, 1.17549435e-38, 0.1, 1 / 3,
             3.4028235677973366e38, -3.4028235677973366e38, 1e300, -1e300,  # round to +-inf
             1e-50, -1e-50, -7e-46, 7e-46,  # round to +-0.0 (Spark hashes -0.0 as 0.0)
             None]
    out: list[Any] = list(fixed)
    while len(out) < ROWS:
        r = rng.random()
        if r < 0.6:  # any float32 bit pattern (NaNs with payloads, subnormals, infinities)
            out.append(struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0])
        elif r < 0.9:  # doubles that are not float32 values: Spark rounds them to nearest
            out.append(rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-30, 30))
        else:
            out.append(float(rng.randint(-(2 ** 24), 2 ** 24)))
    return out


def _doubles(rng: random.Random) -> list[Any]:
    fixed = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, -math.nan,
             struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0],  # signalling NaN
             struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000123))[0],  # NaN with payload
             5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
             -1.7976931348623157e308, 0.1, 1 / 3, 2.0 ** 53, None]
    out: list[Any] = list(fixed)
    while len(out) < ROWS:
        if rng.random() < 0.7:  # any bit pattern
            out.append(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
        else:
            out.append(rng.uniform(-1e9, 1e9))
    return out


def _dates(rng: random.Random) -> list[Any]:
    fixed = [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(1, 1, 1), dt.date(9999, 12, 31),
             dt.date(1582, 10, 4), dt.date(1582, 10, 15), dt.date(2000, 2, 29), None]
    lo, hi = dt.date(1, 1, 1).toordinal(), dt.date(9999, 12, 31).toordinal()
    out: list[Any] = list(fixed)
    while len(out) < ROWS:
        if rng.random() < 0.5:
            out.append(dt.date.fromordinal(rng.randint(lo, hi)))
        else:  # mostly near the epoch, like real data
            out.append(dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-40000, 40000)))
    return out


def _timestamps(rng: random.Random) -> list[Any]:
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    fixed = [epoch, epoch - dt.timedelta(microseconds=1), epoch + dt.timedelta(microseconds=1),
             dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
             dt.datetime(1900, 1, 1, 0, 0, 0, 500000, tzinfo=UTC),
             dt.datetime(2024, 2, 29, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
             None]
    out: list[Any] = list(fixed)
    span = 10 ** 6 * 86400 * 365 * 200  # 200 years of microseconds either side of the epoch
    while len(out) < ROWS:
        us = rng.randint(-span, span)
        if rng.random() < 0.3:
            us -= us % 1_000_000  # whole seconds
        out.append(epoch + dt.timedelta(microseconds=us))
    return out


def _nullable(gen: Callable[[random.Random], list[Any]], p_null: float = 0.1):
    def pick(rng: random.Random) -> list[Any]:
        return [None if rng.random() < p_null else v for v in gen(rng)]
    return pick


def _wall_clock_times(rng: random.Random) -> list[Any]:
    """TIMESTAMP_NTZ values: the same instants' wall-clock readings, without a time zone."""
    return [None if t is None else t.replace(tzinfo=None) for t in _timestamps(rng)]


GENERATORS: dict[str, Callable[[random.Random], list[Any]]] = {
    "string": _strings,
    "binary": _binaries,
    "int": _ints(INT32_MIN, INT32_MAX),
    "bigint": _ints(INT64_MIN, INT64_MAX),
    "smallint": _ints(-(2 ** 15), 2 ** 15 - 1),
    "tinyint": _ints(-128, 127),
    "boolean": _booleans,
    "float": _floats,
    "double": _doubles,
    "date": _dates,
    "timestamp": _timestamps,
    "timestamp_ntz": _wall_clock_times,
}

#: Python values whose default Spark type is the column type (``infer_key_type``).
INFERRED = {"string", "binary", "bigint", "boolean", "double", "date", "timestamp"}


def _spark_type(name: str):
    from pyspark.sql import types as T
    if decimal_type(name) is not None:
        return T.DecimalType(*decimal_type(name))
    return {
        "string": T.StringType(), "binary": T.BinaryType(), "int": T.IntegerType(),
        "bigint": T.LongType(), "smallint": T.ShortType(), "tinyint": T.ByteType(),
        "boolean": T.BooleanType(), "float": T.FloatType(), "double": T.DoubleType(),
        "date": T.DateType(), "timestamp": T.TimestampType(), "timestamp_ntz": T.TimestampNTZType(),
    }[name]


def _compare(spark, types: Sequence[str], keys: list[tuple], check_inferred: bool) -> None:
    """Hash ``keys`` (tuples of column values) in Spark and in Python; every row must agree."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    cols = [f"k{i}" for i in range(len(types))]
    schema = T.StructType([T.StructField("id", T.IntegerType(), False)] + [
        T.StructField(c, _spark_type(t), True) for c, t in zip(cols, types)])
    df = spark.createDataFrame([(i, *key) for i, key in enumerate(keys)], schema)
    h = F.xxhash64(*[F.col(c) for c in cols])
    df = df.select("id", h.alias("h"), *[F.pmod(h, F.lit(m)).alias(f"kg{m}") for m in MAX_PARALLELISMS])
    rows = df.collect()
    assert len(rows) == len(keys)

    mismatches = []
    for row in rows:
        key = keys[row["id"]]
        expected_hash = spark_xxhash64(key, types)
        got = {"h": expected_hash}
        for m in MAX_PARALLELISMS:
            got[f"kg{m}"] = key_group_for_key(key, m, types)
            if check_inferred:
                assert key_group_for_key(key, m) == got[f"kg{m}"], key
        want = {"h": row["h"], **{f"kg{m}": row[f"kg{m}"] for m in MAX_PARALLELISMS}}
        if got != want:
            mismatches.append((key, want, got))
    assert not mismatches, (
        f"{len(mismatches)} of {len(keys)} {'+'.join(types)} keys disagree with Spark; "
        f"first ones (key, spark, python): {[(repr(k)[:80], w, g) for k, w, g in mismatches[:5]]}")


@pytest.mark.parametrize("type_name", list(GENERATORS))
def test_single_column_keys_agree_with_spark(spark, type_name):
    rng = random.Random(f"statekit-key-groups-{type_name}")
    values = GENERATORS[type_name](rng)
    assert len(values) >= 2000 and None in values
    # A scalar key and the equivalent 1-tuple hash the same.
    for v in values[:50]:
        assert key_group_for_key(v, 128, [type_name]) == key_group_for_key((v,), 128, [type_name])
    keys = [(v,) for v in values]
    inferable = type_name in INFERRED
    non_null = [k for k in keys if k[0] is not None]
    _compare(spark, [type_name], keys, check_inferred=False)
    if inferable:  # the same values with their types inferred from Python
        _compare(spark, [type_name], non_null[:300], check_inferred=True)


MULTI_COLUMN = [
    ("string", "bigint"),
    ("int", "string", "binary"),
    ("double", "date", "boolean", "timestamp"),
    ("timestamp_ntz", "bigint", "string"),
    ("smallint", "tinyint", "float", "string"),
]


@pytest.mark.parametrize("types", MULTI_COLUMN, ids=["+".join(t) for t in MULTI_COLUMN])
def test_multi_column_keys_agree_with_spark(spark, types):
    rng = random.Random(f"statekit-key-groups-{'+'.join(types)}")
    columns = [_nullable(GENERATORS[t])(rng) for t in types]
    n = min(len(c) for c in columns)
    keys = [tuple(c[i] for c in columns) for i in range(n)]
    keys.append(tuple(None for _ in types))  # all columns null: the hash is the seed
    assert len(keys) >= 2000
    assert any(None in k for k in keys) and any(None not in k for k in keys)
    _compare(spark, list(types), keys, check_inferred=False)


def test_column_order_matters_and_matches_spark(spark):
    """Several columns chain the seed, so (a, b) and (b, a) hash differently, in Spark too."""
    rng = random.Random("statekit-key-groups-order")
    keys = [(str(rng.random()), str(rng.random())) for _ in range(200)]
    _compare(spark, ["string", "string"], keys, check_inferred=True)
    _compare(spark, ["string", "string"], [(b, a) for a, b in keys], check_inferred=True)
    assert sum(spark_xxhash64(k) != spark_xxhash64(k[::-1]) for k in keys) == len(keys)


DECIMALS = ["decimal(1,0)", "decimal(10,2)", "decimal(18,0)", "decimal(18,18)", "decimal(19,4)", "decimal(38,0)",
            "decimal(38,18)"]


def _decimals(type_name: str, rng: random.Random) -> list[Any]:
    """Values a column of ``type_name`` holds: its extremes, zero, one unit, and random ones of every length."""
    precision, scale = decimal_type(type_name)
    largest = 10 ** precision - 1
    unscaled = [0, 1, -1, largest, -largest, 10 ** (precision - 1), 2 ** 63 - 1, -(2 ** 63), 2 ** 63, -(2 ** 63) - 1,
                255, -256, 128, -129]
    unscaled += [rng.randint(-(10 ** rng.randint(1, precision)) + 1, 10 ** rng.randint(1, precision) - 1)
                 for _ in range(400)]
    values = [decimal.Decimal(u).scaleb(-scale, context=decimal.Context(prec=100)) for u in unscaled
              if abs(u) <= largest]
    return values + [None, None]


@pytest.mark.parametrize("type_name", DECIMALS)
def test_decimal_and_null_keys_agree_with_spark(spark, type_name):
    """Spark hashes a decimal of up to 18 digits as its unscaled long, a longer one as its unscaled
    value's big-endian two's-complement bytes, and skips a null: so does the Python reference."""
    values = _decimals(type_name, random.Random(f"statekit-key-groups-{type_name}"))
    _compare(spark, [type_name], [(v,) for v in values], check_inferred=type_name == "decimal(38,18)")
    _compare(spark, [type_name, "string"], [(v, s) for v, s in zip(values, ["a", None, "", "b"] * 200)],
             check_inferred=False)


def test_keys_inferred_from_decimals_and_nulls_hash_as_pyspark_infers_them(spark):
    """PySpark's createDataFrame takes a Decimal as decimal(38,18), and groups nulls as one key."""
    from pyspark.sql import functions as F

    keys = [decimal.Decimal("1.5"), decimal.Decimal("-0.000000000000000001"), decimal.Decimal("12345678901234567890"),
            None]
    df = spark.createDataFrame([(k,) for k in keys], ["k"])
    assert df.schema["k"].dataType.simpleString() == "decimal(38,18)"
    hashes = [row["h"] for row in df.select(F.xxhash64("k").alias("h")).collect()]
    assert hashes == [spark_xxhash64([k]) for k in keys]
    assert hashes[-1] == 42
    nulls = spark.sql("select xxhash64(cast(null as string)) as a, xxhash64(cast(null as decimal(10,2))) as b, "
                      "xxhash64(cast(1.5 as decimal(10,2))) as c, xxhash64(cast(-1.5 as decimal(30,3))) as d").first()
    assert (nulls["a"], nulls["b"]) == (spark_xxhash64([None]), spark_xxhash64([None], ["decimal(10,2)"]))
    assert nulls["c"] == spark_xxhash64([decimal.Decimal("1.5")], ["decimal(10,2)"])
    assert nulls["d"] == spark_xxhash64([decimal.Decimal("-1.500")], ["decimal(30,3)"])
