"""Key groups without Spark: Flink's formulas for max parallelism and subtask ranges, the
``KeyGroupRange`` value type, validation, and known ``xxhash64`` values taken from Spark SQL."""
from __future__ import annotations

import datetime as dt
import json
import math
import re

import pytest

from statekit.spi.errors import ConfigurationError
from statekit.spi.key_groups import (
    KeyGroupRange, check_parallelism, default_max_parallelism, infer_key_type, key_group_for_key,
    operator_index_for_key_group, spark_xxhash64,
)


def flink_round_up_to_power_of_two(x: int) -> int:
    """``org.apache.flink.util.MathUtils.roundUpToPowerOfTwo``, written as a plain loop."""
    power = 1
    while power < x:
        power *= 2
    return power


def flink_default_max_parallelism(p: int) -> int:
    """``KeyGroupRangeAssignment.computeDefaultMaxParallelism`` (Java int division)."""
    return min(max(flink_round_up_to_power_of_two(p + p // 2), 128), 32768)


def names_value(message: str, value: object) -> bool:
    """True if ``value`` appears in ``message`` as a whole number/token."""
    return re.search(rf"(?<![\w.-]){re.escape(str(value))}(?![\w.])", message) is not None


# --------------------------------------------------------------------------- default max parallelism

@pytest.mark.parametrize("p", [1, 2, 3, 42, 85, 86, 87, 128, 170, 171, 1000, 21845, 21846, 32768, 100000])
def test_default_max_parallelism_known_points(p):
    assert default_max_parallelism(p) == flink_default_max_parallelism(p)


def test_default_max_parallelism_matches_flink_for_every_p_up_to_40000():
    for p in range(1, 40001):
        assert default_max_parallelism(p) == flink_default_max_parallelism(p), p


def test_default_max_parallelism_examples():
    assert default_max_parallelism(1) == 128
    assert default_max_parallelism(85) == 128     # 85 + 42 = 127
    assert default_max_parallelism(86) == 256     # 86 + 43 = 129
    assert default_max_parallelism(1000) == 2048  # 1500 -> 2048
    assert default_max_parallelism(21845) == 32768
    assert default_max_parallelism(50000) == 32768  # capped


@pytest.mark.parametrize("bad", [0, -1, -128, 1.5, "4", None])
def test_default_max_parallelism_rejects_bad_parallelism(bad):
    with pytest.raises(ConfigurationError) as err:
        default_max_parallelism(bad)
    assert names_value(str(err.value), repr(bad)), str(err.value)


# --------------------------------------------------------------------------- subtask ranges

SAMPLES = (
    [(128, p) for p in (1, 2, 3, 4, 7, 15, 77, 128)]
    + [(32768, p) for p in (1, 1000, 32768)]
    + [(77, p) for p in (1, 2, 15, 76, 77)]
    + [(1000, p) for p in (3, 7, 999, 1000)]
    + [(1, 1), (256, 3), (2048, 1000)]
)


@pytest.mark.parametrize("max_p,p", SAMPLES, ids=[f"{m}-{p}" for m, p in SAMPLES])
def test_subtask_ranges_partition_all_key_groups(max_p, p):
    ranges = [KeyGroupRange.of_subtask(max_p, p, i) for i in range(p)]
    # ordered, disjoint, contiguous, none empty
    assert ranges[0].start == 0
    assert ranges[-1].end == max_p - 1
    for a, b in zip(ranges, ranges[1:]):
        assert b.start == a.end + 1
    assert all(len(r) >= 1 for r in ranges)
    # cover [0, maxP) exactly once
    assert sum(len(r) for r in ranges) == max_p
    assert [kg for r in ranges for kg in r] == list(range(max_p))
    # as even as possible (Flink's ranges differ in size by at most one)
    sizes = {len(r) for r in ranges}
    assert sizes <= {max_p // p, -(-max_p // p)}
    # the owner of every key group is the subtask whose range holds it
    for i, r in enumerate(ranges):
        for kg in r:
            assert operator_index_for_key_group(max_p, p, kg) == i
            assert kg in r
        assert r.start - 1 not in r and r.end + 1 not in r
    # and no other range holds it
    for i, r in enumerate(ranges[:50]):
        for j, other in enumerate(ranges[:50]):
            if i != j:
                assert not r.intersects(other)


def test_subtask_ranges_known_values():
    assert [KeyGroupRange.of_subtask(128, 3, i) for i in range(3)] == [
        KeyGroupRange(0, 42), KeyGroupRange(43, 85), KeyGroupRange(86, 127)]
    assert [KeyGroupRange.of_subtask(128, 4, i) for i in range(4)] == [
        KeyGroupRange(0, 31), KeyGroupRange(32, 63), KeyGroupRange(64, 95), KeyGroupRange(96, 127)]
    assert KeyGroupRange.of_subtask(128, 128, 5) == KeyGroupRange(5, 5)
    assert KeyGroupRange.of_subtask(128, 1, 0) == KeyGroupRange(0, 127)


@pytest.mark.parametrize("old_p,new_p", [(4, 2), (2, 4), (2, 2), (15, 77), (77, 15)])
def test_rescale_each_new_range_is_covered_by_old_ranges(old_p, new_p):
    max_p = 128
    old = [KeyGroupRange.of_subtask(max_p, old_p, i) for i in range(old_p)]
    for j in range(new_p):
        new = KeyGroupRange.of_subtask(max_p, new_p, j)
        pieces = [new.intersection(o) for o in old if new.intersects(o)]
        assert sum(len(x) for x in pieces) == len(new)
        assert sorted(kg for x in pieces for kg in x) == list(new)


# --------------------------------------------------------------------------- KeyGroupRange

def test_len_iter_contains():
    r = KeyGroupRange(3, 7)
    assert len(r) == 5
    assert list(r) == [3, 4, 5, 6, 7]
    assert 3 in r and 7 in r and 2 not in r and 8 not in r
    assert "5" not in r and 5.0 not in r
    assert len(KeyGroupRange(4, 4)) == 1


def test_empty_range():
    e = KeyGroupRange.empty()
    assert len(e) == 0
    assert list(e) == []
    assert 0 not in e
    assert len(KeyGroupRange(10, 2)) == 0


def test_intersection():
    a, b = KeyGroupRange(0, 9), KeyGroupRange(5, 20)
    assert a.intersection(b) == b.intersection(a) == KeyGroupRange(5, 9)
    assert len(a.intersection(b)) == 5
    assert a.intersects(b) and b.intersects(a)
    assert a.intersection(KeyGroupRange(9, 9)) == KeyGroupRange(9, 9)
    assert a.intersection(a) == a
    assert a.intersection(KeyGroupRange(2, 4)) == KeyGroupRange(2, 4)
    disjoint = a.intersection(KeyGroupRange(10, 20))
    assert len(disjoint) == 0 and list(disjoint) == []
    assert not a.intersects(KeyGroupRange(10, 20))
    assert len(a.intersection(KeyGroupRange.empty())) == 0
    assert not KeyGroupRange.empty().intersects(KeyGroupRange.empty())


def test_ordering_and_hashing():
    assert sorted([KeyGroupRange(64, 127), KeyGroupRange(0, 63)]) == [KeyGroupRange(0, 63), KeyGroupRange(64, 127)]
    assert len({KeyGroupRange(0, 1), KeyGroupRange(0, 1)}) == 1
    assert str(KeyGroupRange(0, 63)) == "[0, 63]"


@pytest.mark.parametrize("r", [KeyGroupRange(0, 127), KeyGroupRange(5, 5), KeyGroupRange(86, 127),
                               KeyGroupRange(0, 32767), KeyGroupRange.empty()])
def test_json_round_trip(r):
    text = json.dumps(r.to_json())
    back = KeyGroupRange.from_json(json.loads(text))
    assert back == r
    assert len(back) == len(r)
    assert json.loads(text) == [r.start, r.end]


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize("p", [0, -1, -7])
def test_bad_parallelism_is_named(p):
    with pytest.raises(ConfigurationError) as err:
        KeyGroupRange.of_subtask(128, p, 0)
    assert names_value(str(err.value), p), str(err.value)
    assert "parallelism" in str(err.value)


@pytest.mark.parametrize("max_p", [0, -1, 32769, 65536])
def test_bad_max_parallelism_is_named(max_p):
    with pytest.raises(ConfigurationError) as err:
        KeyGroupRange.of_subtask(max_p, 1, 0)
    assert names_value(str(err.value), max_p), str(err.value)
    assert "max parallelism" in str(err.value)


def test_parallelism_above_max_parallelism_names_both():
    with pytest.raises(ConfigurationError) as err:
        KeyGroupRange.of_subtask(128, 129, 0)
    assert names_value(str(err.value), 129) and names_value(str(err.value), 128), str(err.value)
    with pytest.raises(ConfigurationError):
        check_parallelism(1001, 1000)
    check_parallelism(1000, 1000)
    check_parallelism(1, 32768)


@pytest.mark.parametrize("index", [-1, 4, 100])
def test_bad_subtask_index_is_named(index):
    with pytest.raises(ConfigurationError) as err:
        KeyGroupRange.of_subtask(128, 4, index)
    assert names_value(str(err.value), index), str(err.value)


def test_configuration_error_is_a_value_error():
    with pytest.raises(ValueError):
        KeyGroupRange.of_subtask(128, 0, 0)


# --------------------------------------------------------------------------- the hash (no Spark)

#: Values of Spark SQL ``xxhash64(...)`` (PySpark 4.3), used as a regression check without Spark.
SPARK_XXHASH64 = [
    (("a",), ["string"], -8582455328737087284),
    (("",), ["string"], -7444071767201028348),
    (("statekit",), ["string"], -3546000723785189963),
    (("日本語",), ["string"], -619341062884681239),
    ((1,), ["int"], -6698625589789238999),
    ((1,), ["bigint"], -7001672635703045582),
    ((-1,), ["bigint"], 3858142552250413010),
    ((b"\x00\xff",), ["binary"], 879945414100663330),
    ((True,), ["boolean"], -6698625589789238999),
    ((None,), ["string"], 42),
    ((1.5,), ["double"], 7738255526519901366),
    ((-0.0,), ["double"], -5252525462095825812),
    ((1.5,), ["float"], 6163473420726370430),
    ((dt.date(2024, 2, 29),), ["date"], 4183429117450946631),
    ((dt.datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=dt.timezone.utc),), ["timestamp"],
     -2021281541725647388),
    (("user-42", 7), ["string", "bigint"], 937432060589378971),
]


@pytest.mark.parametrize("values,types,expected", SPARK_XXHASH64,
                         ids=[f"{'+'.join(t)}={v!r}" for v, t, _ in SPARK_XXHASH64])
def test_known_spark_xxhash64_values(values, types, expected):
    assert spark_xxhash64(values, types) == expected


def test_known_spark_pmod_values():
    assert key_group_for_key(("user-42", 7), 128) == 27  # pmod(xxhash64('user-42', 7L), 128)
    assert key_group_for_key("a", 77) == 52              # pmod(xxhash64('a'), 77)


def test_inferred_types_follow_spark_defaults():
    assert infer_key_type(True) == "boolean"  # not bigint, though bool is an int
    assert infer_key_type(7) == "bigint"
    assert infer_key_type(1.5) == "double"
    assert infer_key_type("x") == "string"
    assert infer_key_type(b"x") == "binary"
    assert infer_key_type(bytearray(b"x")) == "binary"
    assert infer_key_type(dt.date(2024, 1, 1)) == "date"
    assert infer_key_type(dt.datetime(2024, 1, 1)) == "timestamp"
    assert spark_xxhash64([1]) == spark_xxhash64([1], ["bigint"]) != spark_xxhash64([1], ["int"])


def test_key_group_is_in_range_and_uses_pmod():
    for max_p in (1, 2, 77, 128, 1000, 32768):
        for key in ["a", "", 0, -1, 2 ** 63 - 1, -(2 ** 63), b"\x00", ("x", 1), 3.5, math.inf]:
            kg = key_group_for_key(key, max_p)
            assert 0 <= kg < max_p
            assert kg == spark_xxhash64(key if isinstance(key, tuple) else (key,)) % max_p


def test_hash_is_a_signed_64_bit_integer():
    hashes = [spark_xxhash64([f"k{i}"]) for i in range(2000)]
    assert all(-(2 ** 63) <= h < 2 ** 63 for h in hashes)
    assert any(h < 0 for h in hashes) and any(h > 0 for h in hashes)


def test_nulls_leave_the_running_hash_unchanged():
    assert spark_xxhash64([None], ["bigint"]) == 42
    assert spark_xxhash64([None, None], ["string", "int"]) == 42
    assert spark_xxhash64(["a", None], ["string", "bigint"]) == spark_xxhash64(["a"], ["string"])


def test_float_normalization():
    assert spark_xxhash64([-0.0], ["double"]) == spark_xxhash64([0.0], ["double"])
    assert spark_xxhash64([-0.0], ["float"]) == spark_xxhash64([0.0], ["float"])
    assert spark_xxhash64([-1e-50], ["float"]) == spark_xxhash64([0.0], ["float"])  # underflows to -0.0
    assert spark_xxhash64([1e300], ["float"]) == spark_xxhash64([math.inf], ["float"])  # overflows
    assert spark_xxhash64([math.nan], ["double"]) == spark_xxhash64([-math.nan], ["double"])


def test_unsupported_or_mismatched_types_are_configuration_errors():
    with pytest.raises(ConfigurationError):
        spark_xxhash64([object()])
    with pytest.raises(ConfigurationError):
        spark_xxhash64([1], ["decimal(10,2)"])
    with pytest.raises(ConfigurationError):
        spark_xxhash64([1, 2], ["bigint"])
    assert spark_xxhash64([None]) == 42  # a null of any type: Spark skips it, whatever the column's type
