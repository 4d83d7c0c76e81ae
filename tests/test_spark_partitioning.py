"""Each subtask gets one Spark partition of its own: the Python port of Spark's ``hash()`` agrees
with Spark, and every partition token lands in its subtask's partition."""
import random

import pytest

from statekit.spark.partitioning import partition_tokens, spark_hash_int

pytestmark = pytest.mark.spark


def test_spark_hash_int_agrees_with_spark(spark):
    from pyspark.sql import functions as F
    rng = random.Random(7)
    values = [0, 1, -1, 42, 2**31 - 1, -2**31] + [rng.randint(-2**31, 2**31 - 1) for _ in range(2000)]
    rows = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r.v: r.h for r in rows} == {v: spark_hash_int(v) for v in values}


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4, 7, 8, 16, 33])
def test_each_token_lands_in_its_own_partition(spark, parallelism):
    from pyspark.sql import functions as F
    tokens = partition_tokens(parallelism)
    df = spark.createDataFrame([(t,) for t in tokens], "t int").repartition(parallelism, "t")
    placed = {r.t: r.p for r in df.select("t", F.spark_partition_id().alias("p")).collect()}
    assert [placed[t] for t in tokens] == list(range(parallelism))
