"""Each subtask gets one Spark partition of its own, holding exactly its key groups' rows and its
marker row, and every subtask runs even when no row is for it."""
import random

import pytest

from statekit.spi import KeyGroupRange, key_group_for_key

pytestmark = pytest.mark.spark

MAX_PARALLELISM = 128


@pytest.mark.parametrize("parallelism", [1, 2, 3, 7, 33, 128])
def test_partition_i_holds_subtask_i_key_groups_and_marker(spark, parallelism):
    from pyspark.sql import functions as F

    from statekit.spark.keyed import _plan
    from statekit.spark.task import KEY_GROUP_COLUMN
    rng = random.Random(parallelism)
    keys = [rng.randint(-2**62, 2**62) for _ in range(3000)]
    df = spark.createDataFrame([(k,) for k in keys], "k long")
    placed = _plan(df, ("k",), parallelism, MAX_PARALLELISM).select(
        "k", KEY_GROUP_COLUMN, F.spark_partition_id().alias("p")).collect()
    assert len(placed) == len(keys) + parallelism
    markers = {r.p: r[KEY_GROUP_COLUMN] for r in placed if r.k is None}
    assert markers == {i: -i - 1 for i in range(parallelism)}
    for row in placed:
        if row.k is not None:
            assert row[KEY_GROUP_COLUMN] == key_group_for_key(row.k, MAX_PARALLELISM)
            assert row[KEY_GROUP_COLUMN] in KeyGroupRange.of_subtask(MAX_PARALLELISM, parallelism, row.p)


def test_every_subtask_runs_without_rows(spark):
    """An epoch without input still runs each subtask once (to snapshot its state and fire its timers)."""
    from pyspark import TaskContext

    from statekit.spark.keyed import _plan
    ran = spark.sparkContext.accumulator(0)

    def count(batches):
        rows = sum(batch.num_rows for batch in batches)
        ran.add(10 ** TaskContext.get().partitionId() * rows)
        return iter(())

    empty = spark.createDataFrame([], "k long, v string")
    _plan(empty, ("k",), 4, MAX_PARALLELISM).mapInArrow(count, "k long").write.format("noop").mode("overwrite").save()
    assert ran.value == 1111  # one (marker) row in each of the 4 partitions


@pytest.mark.parametrize("key_groups", [[5, 70], [-2], [-1, 5, -3]])
def test_a_partition_holding_another_subtask_rows_fails_the_epoch(key_groups):
    """Subtask 0 of 2 owns key groups 0..63 and marker -1: anything else means Spark moved rows."""
    import pyarrow as pa

    from statekit.spark.keyed import _of_subtask
    from statekit.spark.task import KEY_GROUP_COLUMN
    from statekit.spi import SnapshotError
    good = pa.RecordBatch.from_pydict({"k": [1, None], KEY_GROUP_COLUMN: pa.array([3, -1], pa.int32())})
    bad = pa.RecordBatch.from_pydict({"k": list(range(len(key_groups))),
                                      KEY_GROUP_COLUMN: pa.array(key_groups, pa.int32())})
    owned = KeyGroupRange.of_subtask(MAX_PARALLELISM, 2, 0)
    assert list(_of_subtask(iter([good]), owned, 0)) == [good]
    with pytest.raises(SnapshotError, match="Spark did not keep statekit's partitioning"):
        list(_of_subtask(iter([good, bad]), owned, 0))
