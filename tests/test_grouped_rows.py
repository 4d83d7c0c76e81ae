"""``GroupedRows.of_sorted``: a batch's rows grouped by key as a ``KeyedVectorFunction`` gets them."""
from __future__ import annotations

import pyarrow as pa

from statekit.runtime.grouped_rows import GroupedRows


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
