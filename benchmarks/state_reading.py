"""Reading state back under Spark (local[2]), on the same data in the same run:

* full read: every key's state of a count-and-last-value job as a DataFrame, statekit's
  ``format("statekit")`` on the job's latest checkpoint (each backend, incremental checkpoints:
  RocksDB's SST files and changelog chains, read through a restore) against Spark's
  ``format("statestore")`` on the checkpoint of a built-in streaming aggregation of the same rows
  (count and last value per key, RocksDB state store). Both are forced to decode every value (a sum
  over it). Record: keys/s.
* one-key lookup: ``statekit.query.QueryableState(job).get("count", key)`` (opening the checkpoint
  included; median of several keys) against the same backend's full read. Record: seconds, lower
  is better.

    python -m benchmarks.state_reading [--keys 1000000] [--json FILE]
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from benchmarks.fixtures import BACKENDS, sized_command
from benchmarks.report import record
from benchmarks.spark_keyed import OUTPUT, SCHEMA, CountAndLast, session, write_source

LOOKUPS = 5


def run(keys: int = 1_000_000, backends: tuple[str, ...] = BACKENDS, spark: Any = None) -> list[dict]:
    work = tempfile.mkdtemp(prefix="statekit-bench-reading-")
    active = spark or session()
    try:
        return _run(active, work, keys, backends)
    finally:
        if spark is None:
            active.stop()
        shutil.rmtree(work, ignore_errors=True)


def _timed(action: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def _run(spark: Any, work: str, keys: int, backends: tuple[str, ...]) -> list[dict]:
    from pyspark.sql import functions as F

    from statekit.query import QueryableState
    from statekit.spark import process_keyed_stream, register_data_sources

    register_data_sources(spark)
    source = write_source(spark, os.path.join(work, "source"), keys, keys, 1)

    def stream() -> Any:
        return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)

    builtin_checkpoint = os.path.join(work, "builtin")
    (stream().groupBy("k").agg(F.count("*").alias("count"), F.last("v").alias("last"))
     .writeStream.format("noop").outputMode("update").option("checkpointLocation", builtin_checkpoint)
     .trigger(availableNow=True).start().awaitTermination())
    jobs = {}
    for backend in backends:
        for name, value in {"backend": backend, "checkpoint.storage": "filesystem", "parallelism": "2",
                            "checkpoint.dir": f"file://{work}/statekit", "checkpoint.incremental": "true",
                            "local.dir": os.path.join(work, "local")}.items():
            spark.conf.set(f"spark.statekit.{name}", value)
        process_keyed_stream(stream(), "k", CountAndLast(), OUTPUT, lambda out, batch_id: out.count(),
                             job_id=f"reading-{backend}", checkpoint_location=os.path.join(work, f"query-{backend}"),
                             trigger={"availableNow": True}).awaitTermination()
        jobs[backend] = f"file://{work}/statekit/reading-{backend}"

    def statestore() -> tuple[int, int]:
        df = spark.read.format("statestore").load(builtin_checkpoint)
        row = df.agg(F.count("*"), F.sum("value.count")).first()
        return int(row[0]), int(row[1])

    def statekit(backend: str) -> tuple[int, int]:
        df = spark.read.format("statekit").option("state", "count").load(jobs[backend])
        row = df.agg(F.count("*"), F.sum("value")).first()
        return int(row[0]), int(row[1])

    statestore()  # untimed: the first read of a session loads the sources' classes and workers
    peer_seconds, peer_result = _timed(statestore)
    results = []
    for backend in backends:
        statekit(backend)  # untimed, as the peer's first read
        seconds, result = _timed(lambda: statekit(backend))
        if result != peer_result:
            raise AssertionError(f"statekit {backend} read {result} (keys, sum of counts), statestore {peer_result}")
        results.append(record(f"read {keys} keys as a DataFrame: statekit {backend} vs statestore",
                              keys / seconds, keys / peer_seconds, "keys/s", group="reading", backend=backend,
                              peer_api="format('statestore')", keys=keys, seconds=seconds, peer_seconds=peer_seconds))
        lookups = []
        for key in range(0, keys, max(1, keys // LOOKUPS))[:LOOKUPS]:
            lookup_seconds, count = _timed(lambda: QueryableState(jobs[backend]).get("count", key))
            if count != 1:
                raise AssertionError(f"key {key}: count {count}, expected 1")
            lookups.append(lookup_seconds)
        lookup = statistics.median(lookups)
        results.append(record(f"one-key lookup: statekit {backend} QueryableState vs its full read", lookup, seconds,
                              "s", group="reading", backend=backend, lookups=lookups, full_read_seconds=seconds))
    return results


def main() -> None:
    sized_command(__doc__.splitlines()[0], run)


if __name__ == "__main__":
    main()
