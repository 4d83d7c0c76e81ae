"""The benchmark harness: every comparison of ``benchmarks/README.md`` in one run, one JSON file,
one table, and a PNG chart if matplotlib is installed.

    python -m benchmarks --quick [--json bench-results.json] [--png bench-results.png]
    python -m benchmarks         # full sizes
    python -m benchmarks --size tiny --sections operations,checkpoint,memory   # the test's smoke run
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from dataclasses import dataclass
from importlib import metadata

from benchmarks import (
    checkpointing, joins, memory, migration, observability, operations, per_row, rescale, serializers, sinks,
    spark_keyed, state_reading, timers, ttl, windows,
)
from benchmarks.chart import save_chart
from benchmarks.report import SCHEMA_VERSION, report


@dataclass(frozen=True)
class Sizes:
    spark: tuple[tuple[int, int, int], ...]  # (rows, keys, micro-batches) per end-to-end run
    operation_keys: int
    operation_ops: int
    operation_rounds: int
    checkpoint_keys: int
    memory_keys: int
    memory_cache_mb: int
    ttl_ops: int
    ttl_epoch_keys: int
    timers: int  # timers registered and fired under Spark
    window_rows: int  # input rows of each windows comparison (tumbling, sliding, sessions)
    reading_keys: int  # keys of state read back as a DataFrame
    sink: tuple[int, int, int]  # (rows, keys, micro-batches) written to Parquet through the sinks
    rescale_keys: int  # keys of state rescaled 4 -> 8 by statekit and by Spark's repartition
    per_row: tuple[int, int]  # (rows, keys) of a KeyedProcessFunction's epoch in one process
    join: tuple[int, int]  # (impressions, micro-batches) of the interval join; readings of the broadcast job
    metrics: tuple[int, int, int, int]  # (rows, keys, micro-batches, rounds) with metrics on and off


SIZES = {
    "tiny": Sizes(((20_000, 2_000, 2),), 2_000, 5_000, 1, 5_000, 5_000, 1, 2_000, 200, 2_000, 10_000, 10_000,
                  (20_000, 2_000, 2), 2_000, (20_000, 2_000), (2_000, 2), (20_000, 2_000, 2, 1)),
    "quick": Sizes(((1_000_000, 100_000, 1),), 50_000, 200_000, 3, 500_000, 1_000_000, 32, 200_000, 5_000,
                   20_000, 200_000, 1_000_000, (1_000_000, 100_000, 5), 200_000, (1_000_000, 100_000), (200_000, 2),
                   (1_000_000, 100_000, 5, 3)),
    "full": Sizes(((1_000_000, 100_000, 1), (1_000_000, 100_000, 10), (5_000_000, 1_000_000, 1),
                   (5_000_000, 1_000_000, 10)), 200_000, 1_000_000, 5, 5_000_000, 4_000_000, 64, 1_000_000, 20_000,
                  200_000, 1_000_000, 1_000_000, (5_000_000, 1_000_000, 5), 1_000_000, (5_000_000, 1_000_000),
                  (1_000_000, 4), (1_000_000, 100_000, 10, 5)),
}
SECTIONS = ("operations", "serializers", "ttl", "checkpoint", "migration", "memory", "per-row", "spark", "timers",
            "windows", "joins", "reading", "sinks", "rescale", "observability")


def _spark(sizes: Sizes) -> list[dict]:
    session = spark_keyed.session()
    try:
        return [r for rows, keys, batches in sizes.spark for r in spark_keyed.run(rows, keys, batches, spark=session)]
    finally:
        session.stop()


def run_sections(sizes: Sizes, sections: tuple[str, ...]) -> list[dict]:
    """The records of ``sections``, in the order of ``SECTIONS``."""
    runners = {
        "operations": lambda: operations.run(n_keys=sizes.operation_keys, n_ops=sizes.operation_ops,
                                             rounds=sizes.operation_rounds),
        "serializers": lambda: serializers.run(n_values=sizes.operation_keys),
        "ttl": lambda: ttl.run(n_ops=sizes.ttl_ops, epoch_keys=sizes.ttl_epoch_keys),
        "checkpoint": lambda: checkpointing.run(n_keys=sizes.checkpoint_keys),
        "migration": lambda: migration.run(keys=sizes.checkpoint_keys),
        "memory": lambda: memory.run(n_keys=sizes.memory_keys, cache_mb=sizes.memory_cache_mb),
        "per-row": lambda: per_row.run(*sizes.per_row),
        "spark": lambda: _spark(sizes),
        "timers": lambda: timers.run(n_timers=sizes.timers),
        "windows": lambda: windows.run(n_rows=sizes.window_rows),
        "joins": lambda: joins.run(*sizes.join),
        "reading": lambda: state_reading.run(keys=sizes.reading_keys),
        "sinks": lambda: sinks.run(*sizes.sink),
        "rescale": lambda: rescale.run(keys=sizes.rescale_keys),
        "observability": lambda: observability.run(*sizes.metrics),
    }
    results: list[dict] = []
    for section in SECTIONS:
        if section in sections:
            started = time.perf_counter()
            results += runners[section]()
            print(f"[benchmarks] {section}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return results


def _versions() -> dict[str, str]:
    versions = {}
    for package in ("statekit", "pyspark", "pyarrow", "rocksdict", "lmdb"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return versions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_const", const="quick", dest="size",
                        help="the quick sizes (a few minutes); the default is the full sizes")
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"a subset of {','.join(SECTIONS)}")
    parser.add_argument("--json", default="bench-results.json", help="where to write the records")
    parser.add_argument("--png", help="also draw a chart here (needs matplotlib)")
    args = parser.parse_args(argv)
    sections = tuple(args.sections.split(","))
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {','.join(SECTIONS)}")

    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    started = time.perf_counter()
    results = run_sections(SIZES[args.size], sections)
    run = {"size": args.size, "sections": list(sections), "started_at": started_at,
           "seconds": round(time.perf_counter() - started, 1), "cpus": os.cpu_count(),
           "python": platform.python_version(), "platform": platform.platform(), "versions": _versions()}
    print()
    report(results, args.json, run)
    print(f"\n{len(results)} comparisons in {run['seconds']:.0f} s; records (schema {SCHEMA_VERSION}) in {args.json}")
    if args.png:
        print(f"chart in {args.png}" if save_chart(results, args.png)
              else "no chart: matplotlib is not installed (pip install 'statekit[bench]')")


if __name__ == "__main__":
    main()
