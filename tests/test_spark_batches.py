"""How the Spark task joins Spark's Arrow batches before a function sees them: up to
``spark.statekit.batch.max-bytes``, rows and their order intact, on every pyarrow the package accepts."""
import pyarrow as pa

from statekit.spark.task import _coalesced


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
