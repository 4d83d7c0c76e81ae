"""What collecting statekit's metrics costs: the same keyed streaming job (``spark_keyed``'s count
and last value per key, heap, local[2]) with ``spark.statekit.metrics.enabled`` true and false,
in the same run, the two settings interleaved (on, off, off, on, ...) so that the machine's drift
hits both alike. Records the median query seconds of each, and, as the noise to read the ratio
against, the spread of the "off" runs (slowest over fastest).

    python -m benchmarks.observability [--rows 1000000] [--keys 100000] [--batches 5] [--rounds 3] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from typing import Any

from benchmarks.report import record, report
from benchmarks.spark_keyed import OUTPUT, SCHEMA, CountAndLast, count_label, session, timed_query, write_source

GROUP = "observability"


def run(rows: int = 1_000_000, keys: int = 100_000, batches: int = 5, rounds: int = 3, spark: Any = None) -> list[dict]:
    work = tempfile.mkdtemp(prefix="statekit-bench-observability-")
    active = spark or session()
    try:
        return _run(active, work, rows, keys, batches, rounds)
    finally:
        if spark is None:
            active.stop()
        shutil.rmtree(work, ignore_errors=True)


def _run(spark: Any, work: str, rows: int, keys: int, batches: int, rounds: int) -> list[dict]:
    from statekit.spark import process_keyed_stream

    source = write_source(spark, os.path.join(work, "source"), rows, keys, batches)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    order = [enabled for pair in range(rounds) for enabled in ((True, False) if pair % 2 == 0 else (False, True))]
    for number, enabled in enumerate([True, *order]):  # the first run warms the workers up and is not counted
        for name, value in {"backend": "heap", "checkpoint.storage": "filesystem", "parallelism": "2",
                            "checkpoint.dir": f"file://{work}/checkpoints-{number}", "metrics.enabled": str(enabled).lower(),
                            "local.dir": os.path.join(work, "local")}.items():
            spark.conf.set(f"spark.statekit.{name}", value)
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
        elapsed = timed_query(lambda: process_keyed_stream(
            stream, "k", CountAndLast(), OUTPUT, sink=lambda df, batch_id: None, job_id=f"metrics-{number}",
            checkpoint_location=os.path.join(work, f"query-{number}"), trigger={"availableNow": True}))
        if number:
            seconds[enabled].append(elapsed)
    spark.conf.unset("spark.statekit.metrics.enabled")
    on, off = statistics.median(seconds[True]), statistics.median(seconds[False])
    size = f"{count_label(rows)} rows, {count_label(keys)} keys, {batches} micro-batches"
    return [record(f"metrics on vs off: query seconds ({size})", on, off, "s", group=GROUP, rounds=rounds,
                   noise=max(seconds[False]) / min(seconds[False]), on_runs=seconds[True], off_runs=seconds[False])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default="bench-observability.json")
    args = parser.parse_args()
    report(run(args.rows, args.keys, args.batches, args.rounds), args.json)


if __name__ == "__main__":
    main()
