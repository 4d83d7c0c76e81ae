"""Keys as functions get them: ``GroupedRows`` (a batch's rows grouped by key, as a
``KeyedVectorFunction`` gets them) and float keys made canonical on every path."""
from __future__ import annotations

import math

import pyarrow as pa
import pytest

from statekit.conformance_tests.workload import WorkloadFunction
from statekit.registry import backend_class
from statekit.runtime import LocalRunner
from statekit.runtime.grouped_rows import GroupedRows
from statekit.spi.key_groups import CANONICAL_NAN


def test_nan_keys_are_one_key() -> None:
    """Rows whose key is NaN are one key, as Spark groups them and as the key group hashes them: split
    into several keys of one call, a function reading state with get_many and writing it with
    update_many would lose all but the last key's rows (RocksDB, LMDB: one cell for every NaN)."""
    nan = float("nan")
    rows = pa.record_batch({"k": pa.array([nan, 1.0, nan, None, None], pa.float64()),
                            "tag": ["x", "x", "x", "x", "x"], "v": [1, 2, 3, 4, 5]})
    key_groups = pa.array([7] * 5, pa.int32())
    single = GroupedRows.of_sorted(rows, ["k"], key_groups)
    assert single.counts().tolist() == [1, 2, 2], f"keys {single.keys!r}, offsets {single.offsets.tolist()}"
    assert single.column("v").to_pylist() == [2, 1, 3, 4, 5], "input order within a key"
    both = GroupedRows.of_sorted(rows, ["k", "tag"], key_groups)
    assert both.counts().tolist() == [1, 2, 2], f"keys {both.keys!r}, offsets {both.offsets.tolist()}"


def test_rows_as_dicts_keep_every_column() -> None:
    """The local runner's rows (dicts) need not all name every column: a column only later rows have
    is still a column (null in the rows without it), not dropped because the first row lacks it."""
    grouped = GroupedRows.of_key_runs([("a", 3, [{"k": "a"}, {"k": "a", "v": 2}]), ("b", 1, [{"k": "b", "w": 1}])])
    assert grouped.rows.schema.names == ["k", "w", "v"], grouped.rows.schema
    assert grouped.column("v").to_pylist() == [None, None, 2]
    assert grouped.column("w").to_pylist() == [1, None, None]
    assert grouped.keys == ["b", "a"] and grouped.offsets.tolist() == [0, 1, 3]


def test_float_keys_are_canonical() -> None:
    """A float key is given as state holds it: -0.0 as 0.0 (one run with 0.0, whichever row sorts
    first) and every NaN as one object (``CANONICAL_NAN``), so a backend stores each under one cell."""
    rows = pa.record_batch({"k": pa.array([-0.0, 0.0, float("nan"), 2.5], pa.float64()), "t": ["a"] * 4})
    for key_columns in (["k"], ["k", "t"]):
        grouped = GroupedRows.of_sorted(rows, key_columns, pa.array([7] * 4, pa.int32()))
        keys = [key if len(key_columns) == 1 else key[0] for key in grouped.keys]
        assert len(keys) == 3 and [math.copysign(1, k) for k in keys if k == 0] == [1.0], keys
        assert [k for k in keys if k != k] == [CANONICAL_NAN] and CANONICAL_NAN in keys


@pytest.mark.parametrize("backend_name", ["heap", "rocksdb", "lmdb"])
def test_nan_and_signed_zero_keys_are_one_key_each_in_every_backend(tmp_path, backend_name) -> None:
    """Spark groups every NaN as one key and -0.0 with 0.0, and so does the key group hash; per-key
    state does too on every backend: a heap dict held each NaN object apart, and RocksDB and LMDB
    stored -0.0 under other bytes than 0.0."""
    options = {} if backend_name == "heap" else {"local-dir": str(tmp_path)}
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=1, max_parallelism=8,
                         state_backend=backend_class(backend_name)(**options), local_dir=str(tmp_path))
    rows = [(float("nan"), "a", 1), (-0.0, "a", 1), (float("nan"), "b", 1), (0.0, "b", 1)]  # (key, category, amount)
    runner.run_epoch(rows)
    counts = runner.run_epoch(rows[::-1])
    assert sorted(count for _, count in counts)[-2:] == [4, 4], counts



@pytest.mark.parametrize("backend_name", ["heap", "rocksdb", "lmdb"])
def test_one_instant_is_one_timestamp_key_in_every_zone(tmp_path, backend_name) -> None:
    """Spark gives timestamp keys in the session's time zone; the same instant seen under another session
    time zone is the same key (Spark groups and hashes instants), as a heap dict finds it, but RocksDB
    and LMDB kept its state under the bytes of the first zone: the key started again from nothing."""
    import datetime as dt
    from zoneinfo import ZoneInfo
    options = {} if backend_name == "heap" else {"local-dir": str(tmp_path)}
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=1, max_parallelism=8,
                         state_backend=backend_class(backend_name)(**options), local_dir=str(tmp_path))
    instant = dt.datetime(2020, 1, 1, tzinfo=ZoneInfo("UTC"))
    runner.run_epoch([(instant, "a", 1)])
    counts = runner.run_epoch([(instant.astimezone(ZoneInfo("America/New_York")), "a", 1)])
    assert [count for _, count in counts] == [2], counts

def test_sum_of_a_64_bit_column_never_wraps() -> None:
    """NumPy adds int64 modulo 2**64: a key whose rows sum past 2**63 - 1 got a negative sum (two rows
    of 2**62 summed to -2**63), where a loop over the rows gets 2**63 and Spark's sum fails."""
    from statekit.spi.errors import FunctionResultError
    rows = pa.record_batch({"k": ["a", "a", "b", "c", "c"],
                            "v": pa.array([2**62, 2**62, -5, -2**62, -2**62], pa.int64()),
                            "u": pa.array([2**63, 2**63, 1, 0, 0], pa.uint64())})
    grouped = GroupedRows.of_sorted(rows, ["k"], pa.array([7] * 5, pa.int32()))
    with pytest.raises(FunctionResultError, match=r"sum\('v'\): the sum of key 'a' is 9223372036854775808, past"):
        grouped.sum("v")
    with pytest.raises(FunctionResultError, match=r"sum\('u'\): the sum of key 'a' is 18446744073709551616"):
        grouped.sum("u")
    within = GroupedRows.of_sorted(rows.slice(2), ["k"], pa.array([7] * 3, pa.int32()))
    assert within.sum("v").tolist() == [-5, -2**63], "sums within int64 (its minimum included) are exact"
    assert within.sum("u").tolist() == [1, 0]


@pytest.mark.parametrize("keys", [
    ["b", "a", None, "c", "a", "é", "B"],
    [2.5, float("nan"), None, -1.0, 10.0, 2.5],
    [("x", 2), ("x", None), ("a", 9), (None, 1), ("x", 1)],
])
def test_the_local_runner_orders_keys_as_spark_does(keys) -> None:
    """GroupedRows holds its keys sorted by key group and key: under Spark by Arrow's sort (nulls
    last, NaN after numbers), in the local runner they were in first-seen order within a key group."""
    columns = ["k"] if not isinstance(keys[0], tuple) else ["k", "j"]
    values = [key if isinstance(key, tuple) else (key,) for key in keys]
    key_groups = [len(str(key)) % 2 for key in keys]
    rows = pa.record_batch({name: [v[i] for v in values] for i, name in enumerate(columns)})
    spark_order = GroupedRows.of_sorted(rows, columns, pa.array(key_groups, pa.int32()))
    runs: dict = {}
    for key, key_group, row in zip(keys, key_groups, rows.to_pylist()):
        runs.setdefault(repr(key), (key, key_group, []))[2].append(row)
    local_order = GroupedRows.of_key_runs(runs.values())
    assert repr(local_order.keys) == repr(spark_order.keys)
    assert local_order.key_groups == spark_order.key_groups


@pytest.mark.parametrize("name", ["k", "kg"])
def test_keys_are_in_key_group_order_whatever_the_key_column_is_called(name) -> None:
    """The sort named the key-group column "kg": a key column called "kg" replaced it, and the keys
    came sorted by key alone."""
    rows = pa.record_batch({name: ["a", "b", "c", "a"]})
    grouped = GroupedRows.of_sorted(rows, [name], pa.array([5, 1, 3, 5], pa.int32()))
    assert (grouped.keys, grouped.key_groups) == (["b", "c", "a"], [1, 3, 5])


@pytest.mark.parametrize("chunk", [65_536, 2], ids=["one chunk", "runs across chunks"])
@pytest.mark.parametrize("names", [("k", "v"), ("k", "it's", 'say "hi"', "a\\b", "x\ny", "über")],
                         ids=["plain", "names that need quoting"])
def test_row_runs_give_each_keys_rows_as_dicts_in_input_order(names, chunk, monkeypatch) -> None:
    """How a ``KeyedProcessFunction`` gets its rows under Spark: per key, in input order, each row a
    dict of every column, as ``RecordBatch.to_pylist`` makes it, whatever the columns are called,
    also where a key's rows span two of the chunks the columns are converted in."""
    from statekit.runtime import grouped_rows

    monkeypatch.setattr(grouped_rows, "ROW_CHUNK", chunk)
    values = {"k": ["b", "a", "b", "a", "c"]}
    values.update({name: [f"{name}{i}" for i in range(5)] for name in names[1:]})
    rows = pa.record_batch({name: values[name] for name in names})
    grouped = GroupedRows.of_sorted(rows, ["k"], pa.array([2, 1, 2, 1, 0], pa.int32()))
    runs = [(key, key_group, list(key_rows)) for key, key_group, key_rows in grouped.row_runs()]
    by_key = {key: [row for row in rows.to_pylist() if row["k"] == key] for key in "abc"}
    assert runs == [("c", 0, by_key["c"]), ("a", 1, by_key["a"]), ("b", 2, by_key["b"])]
    assert list(GroupedRows.of_sorted(rows.slice(0, 0), ["k"], pa.array([], pa.int32())).row_runs()) == []


@pytest.mark.parametrize("seed", range(5))
def test_grouping_is_a_stable_sort_by_key_group_and_key(seed) -> None:
    """Keys of exact types are grouped by hashing (and only the keys sorted): the result is the
    stable sort of the rows by key group and key columns, nulls last, as for float keys."""
    import datetime
    import random

    from statekit.runtime.grouped_rows import _sort_key

    rng = random.Random(seed)
    n = 2_000
    columns = {
        "s": pa.array([None if rng.random() < 0.05 else f"s{rng.randrange(30)}" for _ in range(n)]),
        "i": pa.array([None if rng.random() < 0.05 else rng.randrange(-20, 20) for _ in range(n)], pa.int64()),
        "t": pa.array([datetime.datetime(2026, 1, 1) + datetime.timedelta(seconds=rng.randrange(40))
                       for _ in range(n)], pa.timestamp("us")),
        "f": pa.array([rng.choice([0.5, -1.0, None]) for _ in range(n)], pa.float64()),
        "v": pa.array(range(n)),
    }
    rows = pa.record_batch(columns)
    for key_columns in (["s"], ["i"], ["t"], ["s", "i"], ["i", "f"]):
        values = [tuple(columns[c][j].as_py() for c in key_columns) for j in range(n)]
        key_groups = [hash(value) % 11 for value in values]
        expected = sorted(range(n), key=lambda j: (key_groups[j], _sort_key(values[j])))
        grouped = GroupedRows.of_sorted(rows, key_columns, pa.array(key_groups, pa.int32()))
        assert grouped.column("v").to_pylist() == expected, key_columns
        keys = [key if isinstance(key, tuple) else (key,) for key in grouped.keys]
        assert keys == list(dict.fromkeys(values[j] for j in expected)), key_columns
