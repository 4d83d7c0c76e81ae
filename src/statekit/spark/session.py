"""What statekit asks of a SparkSession, asked the same way on a classic session and on a Spark
Connect session: through conf and DataFrames only (Connect has no ``SparkContext``, accumulators,
broadcast variables or JVM access, and statekit uses none of them on either).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from pyspark.sql import SparkSession, functions as F

#: where a Connect session's DataFrames take their default number of partitions from, ahead of
#: Spark's default parallelism; unset while ``default_parallelism`` looks
LEAF_PARALLELISM_SETTING = "spark.sql.leafNodeDefaultParallelism"


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a Spark Connect server). Told by
    the session's class, so that neither kind of session is imported or started to find out."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def application_name(spark: SparkSession) -> str:
    """The application's name (``spark.app.name``), the default job id."""
    return spark.conf.get("spark.app.name")


def default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (``SparkContext.defaultParallelism``: ``spark.default.parallelism``,
    else the cores of the executors), found by a job of one row: ``spark.range`` splits its rows
    into that many partitions and puts the last row into the last one."""
    with _unset(spark, LEAF_PARALLELISM_SETTING):
        (row,) = spark.range(0, 1, 1).select(F.spark_partition_id().alias("partition")).collect()
    return int(row["partition"]) + 1


@contextlib.contextmanager
def _unset(spark: SparkSession, key: str) -> Iterator[None]:
    """``key`` unset while the block runs, then as it was."""
    previous = spark.conf.get(key, None)
    if previous is None:
        yield
        return
    spark.conf.unset(key)
    try:
        yield
    finally:
        spark.conf.set(key, previous)
