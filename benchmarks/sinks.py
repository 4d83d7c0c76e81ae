"""Exactly-once output under Spark (local[2]), on the same job in the same run: a statekit
streaming job (count and last value per key, one output row per key and micro-batch) writing
Parquet

* through the transactional path: ``ParquetFileSink`` (subtasks stage their files, the driver
  publishes them by rename once the epoch's checkpoint is complete), against
* a plain ``foreachBatch`` append: the same job with the function sink
  ``out.write.mode("append").parquet(dir)`` (at least once).

Records: output rows/s of each (whole query, the same rows written), and the commit latency per
epoch (the driver's commits of one epoch's staged files) against the epoch's duration.

    python -m benchmarks.sinks [--rows 1000000] [--keys 100000] [--batches 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from benchmarks.report import record, report
from benchmarks.spark_keyed import OUTPUT, SCHEMA, CountAndLast, session, write_source
from statekit.sinks import ParquetFileSink


class TimedParquetSink(ParquetFileSink):
    """Records how long each commit takes (commits run on the driver, in this process)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.commits: list[tuple[str, float]] = []

    def commit(self, record: dict[str, Any]) -> None:
        started = time.perf_counter()
        super().commit(record)
        self.commits.append((record["id"], time.perf_counter() - started))


def run(rows: int = 1_000_000, keys: int = 100_000, batches: int = 5, spark: Any = None) -> list[dict]:
    work = tempfile.mkdtemp(prefix="statekit-bench-sinks-")
    active = spark or session()
    try:
        return _run(active, work, rows, keys, batches)
    finally:
        if spark is None:
            active.stop()
        shutil.rmtree(work, ignore_errors=True)


def _run(spark: Any, work: str, rows: int, keys: int, batches: int) -> list[dict]:
    from statekit.spark import process_keyed_stream

    source = write_source(spark, os.path.join(work, "source"), rows, keys, batches)
    for name, value in {"backend": "heap", "checkpoint.storage": "filesystem", "parallelism": "2",
                        "checkpoint.dir": f"file://{work}/checkpoints", "local.dir": os.path.join(work, "local")}.items():
        spark.conf.set(f"spark.statekit.{name}", value)

    def query(name: str, sink: Any) -> tuple[float, int, list[float]]:
        """Seconds of the whole query, rows written, and each micro-batch's duration."""
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
        started = time.perf_counter()
        running = process_keyed_stream(stream, "k", CountAndLast(), OUTPUT, sink, job_id=f"sinks-{name}",
                                       checkpoint_location=os.path.join(work, f"query-{name}"),
                                       trigger={"availableNow": True})
        running.awaitTermination()
        seconds = time.perf_counter() - started
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in running.recentProgress]
        written = spark.read.parquet(os.path.join(work, f"out-{name}")).count()
        return seconds, written, durations

    def append(out: Any, batch_id: int) -> None:
        out.write.mode("append").parquet(os.path.join(work, "out-append"))

    query("warm-up", lambda out, batch_id: out.write.mode("overwrite").parquet(os.path.join(work, "out-warm-up")))
    peer_seconds, peer_rows, _ = query("append", append)
    sink = TimedParquetSink(f"file://{work}/out-transactional")
    seconds, written, durations = query("transactional", sink)
    if written != peer_rows:
        raise AssertionError(f"the transactional sink wrote {written} rows, the append {peer_rows}")
    per_epoch: dict[str, float] = {}
    for transaction_id, commit_seconds in sink.commits:
        epoch = transaction_id.split("~")[-4]  # statekit~job~operator~epoch~subtask~run~attempt
        per_epoch[epoch] = per_epoch.get(epoch, 0.0) + commit_seconds
    commit_latency = statistics.median(per_epoch.values())
    epoch_seconds = statistics.median(durations)
    details = {"rows": rows, "keys": keys, "micro_batches": batches, "output_rows": written}
    return [
        record(f"output rows/s to Parquet, {rows // 1000}k rows / {keys // 1000}k keys / {batches} batches: "
               f"ParquetFileSink (exactly once) vs foreachBatch append", written / seconds, peer_rows / peer_seconds,
               "rows/s", group="sinks", seconds=seconds, peer_seconds=peer_seconds, **details),
        record("commit latency per epoch (ParquetFileSink, median) vs the epoch's duration", commit_latency,
               epoch_seconds, "s", group="sinks", commit_seconds_per_epoch=per_epoch, epoch_seconds=durations,
               **details),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    report(run(args.rows, args.keys, args.batches), args.json)


if __name__ == "__main__":
    main()
