"""How the Spark task joins Spark's Arrow batches before a function sees them: up to
``spark.statekit.batch.max-bytes``, rows and their order intact, on every pyarrow the package accepts;
and how it turns the rows a function returns into Arrow batches of the output schema."""
import pyarrow as pa
import pytest

from statekit.runtime.metrics import TaskMetrics
from statekit.spark.task import _coalesced, _emit_columns, _to_batch
from statekit.spi.errors import StatekitError


def _batch(first: int, rows: int) -> pa.RecordBatch:
    keys = list(range(first, first + rows))
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.int64()), pa.array([None if k % 3 == 0 else b"v%d" % k for k in keys], pa.binary())],
        names=["key", "value"])


def test_batches_join_up_to_the_byte_limit_keeping_rows_and_order():
    batches = [_batch(first, 4) for first in range(0, 20, 4)] + [_batch(20, 0)]
    joined = list(_coalesced(iter(batches), max_bytes=2 * batches[0].nbytes))
    assert [b.num_rows for b in joined] == [8, 8, 4]
    assert all(b.schema == batches[0].schema for b in joined)
    assert pa.Table.from_batches(joined).to_pydict() == pa.Table.from_batches(batches).to_pydict()


def test_a_lone_batch_passes_through_and_no_batches_give_none():
    batch = _batch(0, 5)
    assert [b is batch for b in _coalesced(iter([batch]), max_bytes=1 << 20)] == [True]
    assert list(_coalesced(iter([]), max_bytes=1)) == []


OUTPUT = pa.schema([("key", pa.string()), ("tag", pa.string()), ("n", pa.int64())])


def test_rows_as_tuples_lists_and_dicts():
    rows = [("a", "x", 1), ["b", "y", 2], {"n": 3, "key": "c"}]
    assert _to_batch(rows, OUTPUT).to_pylist() == [{"key": "a", "tag": "x", "n": 1}, {"key": "b", "tag": "y", "n": 2},
                                                   {"key": "c", "tag": None, "n": 3}]


@pytest.mark.parametrize("rows,message", [
    # one row returned as it is instead of [row]: its values were taken as rows, a string as a row of
    # its characters (two rows of garbage here, silently)
    (["ann", "x"], r"a row 'ann' \(str\).*return \[row\]"),
    (["ann", "x", 1], r"a row 'ann' \(str\).*return \[row\]"),
    # a tuple of the wrong width among dicts was cut or padded with nulls, silently
    ([("a", "x"), {"key": "b"}], r"a row of 2 values \('a', 'x'\); the output schema has 3 columns"),
    ([("a", "x", 1, 2), {"key": "b"}], r"a row of 4 values"),
])
def test_what_is_not_a_row_of_the_output_schema_fails_naming_it(rows, message):
    with pytest.raises(StatekitError, match=message):
        _to_batch(rows, OUTPUT)


def test_a_value_of_the_wrong_type_fails_naming_its_column():
    with pytest.raises(StatekitError, match=r"output column 'n' \(int64\).*'many'"):
        _to_batch([("a", "x", 1), ("b", "y", "many")], OUTPUT)


@pytest.mark.parametrize("rows", [[("a", None, 1), ("b", "y", 2)], [{"key": "a", "n": 1}]])
def test_a_null_in_a_not_null_output_column_fails_naming_it(rows):
    """Spark trusts the output schema: a null in a NOT NULL column failed the task with a
    NullPointerException in the JVM (three times, retried)."""
    schema = pa.schema([("key", pa.string()), pa.field("tag", pa.string(), nullable=False), ("n", pa.int64())])
    with pytest.raises(StatekitError, match=r"returned null for output column 'tag', which the output schema "
                                            r"declares NOT NULL"):
        _to_batch(rows, schema)


def test_a_null_in_a_not_null_output_column_of_columns_fails_naming_it():
    schema = pa.schema([pa.field("key", pa.string(), nullable=False), ("n", pa.int64())])
    with pytest.raises(StatekitError, match=r"output column 'key', which the output schema declares NOT NULL"):
        list(_emit_columns(pa.table({"key": ["a", None], "n": [1, 2]}), schema, None, TaskMetrics()))
    assert list(_emit_columns(pa.table({"key": ["a"], "n": [None]}), schema, None, TaskMetrics()))[0].num_rows == 1
