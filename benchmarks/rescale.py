"""Rescale 4 -> 8 under Spark (local[2]) in one run: statekit's restore-and-continue against Spark's
own offline state repartition, on the same keys' state.

* Spark: a built-in streaming aggregation (count and last value per key, RocksDB state store, 4
  shuffle partitions) runs one micro-batch of ``keys`` rows (one per key) and stops. Its checkpoint
  is repartitioned to 8 partitions by ``StreamingCheckpointManager.repartition`` (new in Spark 4.2;
  PySpark 4.3 reaches it as ``spark._streamingCheckpointManager.repartition(location, 8)``, there
  is no ``spark.streams.repartition``), timed. The query then restarts on a new file of
  ``keys // 10`` rows of known keys, and its first micro-batch is timed.
* statekit, per backend: the same state (``spark_keyed.CountAndLast``: count and last value per
  key) at parallelism 4, incremental checkpoints on the ``filesystem`` storage, one micro-batch.
  Timed: the restore of the 8 new subtasks from that checkpoint in this process, one after another
  (seconds summed: the work of the rescale); then the query restarted at parallelism 8 on the same
  new file, whose first micro-batch restores the 8 subtasks (under Spark) and processes it.

Records: statekit's restore at 8 vs Spark's repartition; statekit's first micro-batch at 8 vs
Spark's repartition plus its first micro-batch at 8 (what a rescale costs before the job is back).
Every side first runs its whole cycle untimed on a small input: the JVM, the Python workers and
the repartition's classes are warm when the timed cycle runs. Both sinks check the restored state:
every key of the new file must count 2 rows.

    python -m benchmarks.rescale [--keys 1000000] [--backends heap,rocksdb,lmdb] [--json FILE]
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Callable

from benchmarks.fixtures import BACKENDS, MAX_P, keyed_backend, sized_command
from benchmarks.report import record
from benchmarks.spark_keyed import OUTPUT, SCHEMA, CountAndLast, count_label, session, write_source

OLD, NEW = 4, 8
WARM_UP_KEYS = 10_000
PEER_API = "StreamingCheckpointManager.repartition"


def run(keys: int = 1_000_000, backends: tuple[str, ...] = BACKENDS, spark: Any = None) -> list[dict]:
    """Spark's cycle and each backend's over ``keys`` keys; two records per backend. Starts (and
    stops) a session unless ``spark`` is given."""
    work = tempfile.mkdtemp(prefix="statekit-bench-rescale-")
    active = spark or session()
    partitions = active.conf.get("spark.sql.shuffle.partitions")
    try:
        return _run(active, work, keys, backends)
    finally:
        active.conf.set("spark.sql.shuffle.partitions", partitions)
        if spark is None:
            active.stop()
        shutil.rmtree(work, ignore_errors=True)


def _timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


class _Cycle:
    """One side's run at 4, rescale and run at 8 over its own source and checkpoints."""

    def __init__(self, spark: Any, work: str, name: str, keys: int) -> None:
        self.spark, self.keys = spark, keys
        self.directory = os.path.join(work, name)
        self.source = write_source(spark, os.path.join(self.directory, "source"), keys, keys, 1)
        self.checkpoint = os.path.join(self.directory, "query-checkpoint")
        self.counted: list[int] = []

    def stream(self) -> Any:
        return self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(self.source)

    def sink(self, output: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        self.counted.append(output.agg(F.sum("count")).first()[0] or 0)

    def add_rows(self) -> None:
        """``keys // 10`` rows of the keys ``0 .. keys // 10 - 1``, each seen once before."""
        write_source(self.spark, self.source, self.keys // 10, self.keys, 1, first_id=self.keys)

    def check(self) -> None:
        expected = 2 * (self.keys // 10)
        if self.counted[-1:] != [expected]:
            raise AssertionError(f"{self.directory}: the micro-batch after the rescale counted {self.counted[-1:]} "
                                 f"rows over its keys, expected {expected}: state was lost in the rescale")


def spark_cycle(spark: Any, work: str, name: str, keys: int) -> tuple[float, float]:
    """Seconds of Spark's repartition 4 -> 8 and of the first micro-batch after it."""
    from pyspark.sql import functions as F

    cycle = _Cycle(spark, work, name, keys)

    def start() -> None:
        (cycle.stream().groupBy("k").agg(F.count("*").alias("count"), F.last("v").alias("last"))
         .writeStream.foreachBatch(cycle.sink).outputMode("update").option("checkpointLocation", cycle.checkpoint)
         .trigger(availableNow=True).start().awaitTermination())

    spark.conf.set("spark.sql.shuffle.partitions", str(OLD))  # recorded in the checkpoint
    start()
    repartition = _timed(lambda: spark._streamingCheckpointManager.repartition(cycle.checkpoint, NEW))
    cycle.add_rows()
    first_batch = _timed(start)
    cycle.check()
    return repartition, first_batch


def statekit_cycle(spark: Any, work: str, name: str, keys: int, backend: str) -> tuple[float, float]:
    """Seconds of restoring the 8 subtasks from the checkpoint at 4 (in this process) and of the
    first micro-batch of the query restarted at 8."""
    from statekit.reading.snapshot_reader import SnapshotReader
    from statekit.spark import process_keyed_stream

    cycle = _Cycle(spark, work, name, keys)
    checkpoints = f"file://{cycle.directory}/statekit"
    job_id = f"rescale-{backend}"

    def start(parallelism: int) -> None:
        for setting, value in {"backend": backend, "checkpoint.storage": "filesystem", "checkpoint.dir": checkpoints,
                               "checkpoint.incremental": "true", "parallelism": str(parallelism),
                               "max-parallelism": str(MAX_P), "local.dir": os.path.join(cycle.directory, "local")
                               }.items():
            spark.conf.set(f"spark.statekit.{setting}", value)
        process_keyed_stream(cycle.stream(), "k", CountAndLast(), OUTPUT, cycle.sink, job_id=job_id,
                             checkpoint_location=cycle.checkpoint, trigger={"availableNow": True}).awaitTermination()

    start(OLD)
    reader = SnapshotReader.open(f"{checkpoints}/{job_id}")
    restore = _restore_seconds(reader, backend, os.path.join(cycle.directory, "restored"))
    cycle.add_rows()
    first_batch = _timed(lambda: start(NEW))
    cycle.check()
    return restore, first_batch


def _restore_seconds(reader: Any, backend: str, local_dir: str) -> float:
    """Seconds to restore every subtask of ``NEW`` from the reader's checkpoint, one after another."""
    from statekit.checkpoint.assignment import assign
    from statekit.spi.key_format import read_key_serializer

    operator = reader.operator()
    handles = [h for s in operator.subtasks for h in s.keyed]
    key_serializer = read_key_serializer(handles[0].key_serializer_snapshot())[0].restore_serializer()
    total = 0.0
    for index in range(NEW):
        started = time.perf_counter()
        restored = keyed_backend(backend, local_dir, subtask=index, parallelism=NEW,
                                 restore=assign(operator, index, NEW).keyed, streams=reader.streams,
                                 key_serializer=key_serializer, max_parallelism=operator.max_parallelism)
        total += time.perf_counter() - started
        restored.dispose()
    return total


def _run(spark: Any, work: str, keys: int, backends: tuple[str, ...]) -> list[dict]:
    warm_up = min(keys, WARM_UP_KEYS)
    spark_cycle(spark, work, "spark-warm-up", warm_up)
    repartition, spark_first_batch = spark_cycle(spark, work, "spark", keys)
    results = []
    label = f"rescale {OLD}->{NEW}, {count_label(keys)} keys"
    for backend in backends:
        statekit_cycle(spark, work, f"{backend}-warm-up", warm_up, backend)
        restore, first_batch = statekit_cycle(spark, work, backend, keys, backend)
        details = {"backend": backend, "peer_api": PEER_API, "keys": keys, "repartition_seconds": repartition,
                   "peer_first_batch_seconds": spark_first_batch, "restore_seconds": restore,
                   "first_batch_seconds": first_batch}
        results += [
            record(f"{label}: statekit {backend} restore at {NEW} vs Spark repartition", restore, repartition, "s",
                   group="rescale", **details),
            record(f"{label}: statekit {backend} first batch at {NEW} vs Spark repartition + first batch",
                   first_batch, repartition + spark_first_batch, "s", group="rescale", **details)]
    return results


def main() -> None:
    sized_command(__doc__.splitlines()[0], run)


if __name__ == "__main__":
    main()
