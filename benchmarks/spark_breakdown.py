"""Where a statekit micro-batch's time goes under Spark: the job of ``spark_keyed`` (heap, one
micro-batch, ``KeyedVectorFunction``) next to queries that each do one part less, in one session,
interleaved, best of ``rounds``:

* a ``foreachBatch`` doing nothing: starting and ending the query and listing its source;
* a ``foreachBatch`` running statekit's plan (key groups, markers, ``repartitionById``) into a
  ``mapInArrow`` that drops every batch (in Arrow batches as large as statekit's): the shuffle and
  the transfer of every row to Python;
* statekit with a function that does nothing: the engine (grouping the rows by key, restore,
  snapshot, checkpoint);
* statekit with count + last value per key in bulk state;
* the plan's floor after the pre-aggregation (``groupBy(k).agg(count, last)``), the same
  ``foreachBatch`` as the second;
* statekit with count + last over the pre-aggregated rows; and the same with a sink function
  (``out.count()``) instead of ``DiscardingSink``: the output kept for the function (a local
  checkpoint of the stage) and the function's own Spark job.

statekit's sides drop their output in the stage (``DiscardingSink``), as the built-in
aggregation does (the ``noop`` format), except the last.

Each is a record of its seconds against Spark's built-in streaming aggregation of the same job
(lower is better). Each side does one part more than the one before it, so their difference is
that part's cost; the pre-aggregated floor starts a second chain, of the sides after it.

    python -m benchmarks.spark_breakdown [--rows 1000000] [--keys 100000] [--rounds 3] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any, Callable, Iterator

from benchmarks.report import record, report
from benchmarks.spark_keyed import (
    BUILT_IN, OUTPUT, SCHEMA, PreAggregatedCountAndLast, VectorCountAndLast, timed_query, count_label, session,
    write_source,
)
from statekit.runtime import KeyedVectorFunction
from statekit.sinks import DiscardingSink
from statekit.spark.pre_aggregation import PreAggregation

WARM_UP_ROWS = 10_000


class DoNothing(KeyedVectorFunction):
    """No state, no output."""

    def process_groups(self, groups: Any, ctx: Any) -> None:
        return None


def _read_all(batches: Iterator[Any]) -> Iterator[Any]:
    """Every batch read, none returned (a function that returned at once would leave its input
    unread: a different path through Spark's Python runner)."""
    for _ in batches:
        pass
    return iter(())


def run(rows: int = 1_000_000, keys: int = 100_000, rounds: int = 3) -> list[dict]:
    from pyspark.sql import functions as F

    from statekit.spark import process_keyed_stream
    from statekit.spark.keyed import ARROW_BATCH_ROWS, ARROW_BATCH_ROWS_SETTING, _plan, _session_conf

    spark = session()
    work = tempfile.mkdtemp(prefix="statekit-bench-breakdown-")
    queries = iter(range(1_000_000))

    def stream(source: str) -> Any:
        return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)

    def checkpoint() -> str:
        return os.path.join(work, "queries", str(next(queries)))

    def each_batch(function: Callable[[Any, int], None]) -> Callable[[str], Any]:
        return lambda source: (stream(source).writeStream.foreachBatch(function)
                               .option("checkpointLocation", checkpoint()).trigger(availableNow=True).start())

    def dropped(pre_aggregate: dict[str, Any] | None = None) -> Callable[[Any, int], None]:
        pre_aggregation = PreAggregation.of(pre_aggregate, ("k",), None)

        def drop(df: Any, batch_id: int) -> None:
            if pre_aggregation is not None:
                df = pre_aggregation.apply(df)
            with _session_conf(df.sparkSession, ARROW_BATCH_ROWS_SETTING, str(ARROW_BATCH_ROWS)):  # as statekit's stage
                _plan(df, ("k",), 2, 128).mapInArrow(_read_all, "k long").write.format("noop") \
                    .mode("overwrite").save()
        return drop

    def statekit(function: type, pre_aggregate: dict[str, Any] | None = None,
                 sink: Any = DiscardingSink()) -> Callable[[str], Any]:
        def start(source: str) -> Any:
            location = checkpoint()
            for name, value in {"backend": "heap", "checkpoint.storage": "filesystem", "parallelism": "2",
                                "checkpoint.dir": f"file://{location}-statekit", "checkpoint.incremental": "true",
                                "local.dir": os.path.join(work, "local")}.items():
                spark.conf.set(f"spark.statekit.{name}", value)
            return process_keyed_stream(stream(source), "k", function(), OUTPUT, sink,
                                        job_id=f"breakdown-{os.path.basename(location)}", checkpoint_location=location,
                                        trigger={"availableNow": True}, pre_aggregate=pre_aggregate)
        return start

    def built_in(source: str) -> Any:
        counted = stream(source).groupBy("k").agg(F.count("*").alias("count"), F.last("v").alias("last"))
        return (counted.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint())
                .trigger(availableNow=True).start())

    pre_aggregate = {"count": F.count("*"), "last": F.last("v")}
    sides: dict[str, Callable[[str], Any]] = {
        BUILT_IN: built_in,
        "a foreachBatch doing nothing": each_batch(lambda df, batch_id: None),
        "statekit's plan into a mapInArrow dropping the rows": each_batch(dropped()),
        "statekit, a function doing nothing": statekit(DoNothing),
        "statekit, count + last in bulk state": statekit(VectorCountAndLast),
        "statekit's plan after pre-aggregation into a mapInArrow dropping the rows": each_batch(dropped(pre_aggregate)),
        "statekit, count + last pre-aggregated": statekit(PreAggregatedCountAndLast, pre_aggregate),
        "statekit, count + last pre-aggregated, a sink function": statekit(
            PreAggregatedCountAndLast, pre_aggregate, lambda out, batch_id: out.count()),
    }
    try:
        warm_up = write_source(spark, os.path.join(work, "warm-up"), min(rows, WARM_UP_ROWS), keys, 1)
        source = write_source(spark, os.path.join(work, "source"), rows, keys, 1)
        best: dict[str, float] = {}
        for _ in range(rounds):
            for name, start in sides.items():
                # right before each timed run, as in ``spark_keyed``: a Python worker that another side
                # used last has not imported statekit yet
                timed_query(lambda: start(warm_up))
                best[name] = min(best.get(name, float("inf")), timed_query(lambda: start(source)))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    size = f"{count_label(rows)} rows/{count_label(keys)} keys"
    return [record(f"breakdown {size}: {name} vs {BUILT_IN}", best[name], best[BUILT_IN], "s", group="spark",
                   rows=rows, keys=keys, rounds=rounds) for name in sides if name != BUILT_IN]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    report(run(args.rows, args.keys, args.rounds), args.json)


if __name__ == "__main__":
    main()
