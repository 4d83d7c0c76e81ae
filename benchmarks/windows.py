"""Event-time windows under Spark (local[2]) against Spark's built-in windowed aggregations.

``statekit.windows`` on every backend and Spark, on the same data in the same run:

* tumbling: 1-minute windows, the sum of a value column per key, against
  ``groupBy(window("ts", "1 minute"), "k").agg(sum("v"))``;
* sliding: 2-minute windows every minute, counted, against ``window("ts", "2 minutes", "1 minute")``;
* sessions: 30-minute sessions per user, counted, against ``session_window("ts", "30 minutes")``.

Both sides read the same Parquet files one per micro-batch (trigger ``availableNow``), watermark
delay 0 (Spark's side in append mode), into the same ``foreachBatch`` sink, which counts the
output rows and sums their results in one action per micro-batch; each side runs untimed on a
small input first (JVM and Python worker warm-up), then ``ROUNDS`` times, interleaved, its best
run recorded. The input's last two files hold one row each, a
day later, which move the watermark past every window so that all of them are emitted. Records:
input rows per second, aim 1.0x Spark's; details: each side's output rows and the sum of its
results, and the input's sum (Spark's side includes the window(s) of the first late row, which its
micro-batch without data closes: one or two more windows, of count 1 or value 0).

    python -m benchmarks.windows [--rows 200000] [--backends heap,rocksdb,lmdb] [--json FILE]
"""
from __future__ import annotations

import shutil
import tempfile
from typing import Any, Callable

from benchmarks.fixtures import BACKENDS, sized_command
from benchmarks.report import record
from benchmarks.spark_keyed import session
from benchmarks.timers import T0_SECONDS, WARM_UP, Queries, timed
from statekit import windows

START = T0_SECONDS - T0_SECONDS % 3600  # an hour's start, so that each key's rows fill whole windows
ROWS_PER_KEY = 100  # 6 seconds apart: 10 one-minute windows of 10 rows per key
SESSION_GAP = "30 minutes"
#: each side's best of this many timed runs, interleaved: a session's first statekit query on a
#: large input runs up to 2x slower than the next (Python workers and their imports, the JVM's code)
ROUNDS = 2


class TotallingQueries(Queries):
    """``Queries`` whose statekit sinks also sum the output's ``result`` column, per job and phase."""

    def __init__(self, spark: Any, work: str) -> None:
        super().__init__(spark, work)
        self.totals: dict[str, dict[str, int]] = {}
        self._sums: dict[str, int] = {}

    def statekit(self, prefix: str, backend: str, key: str, function: Callable[[], Any], schema: str, output: str,
                 emitted: dict[str, int]) -> Callable[[str, str], Any]:
        start = super().statekit(prefix, backend, key, function, schema, output, emitted)

        def totalled(source: str, phase: str) -> Any:
            self._sums = self.totals[f"{prefix}-{phase}"] = {}
            return start(source, phase)
        return totalled

    def counting_sink(self, emitted: dict[str, int], result: str = "result") -> Callable[[Any, int], None]:
        from pyspark.sql import functions as F

        sums = self._sums

        def sink(out: Any, batch_id: int) -> None:
            emitted[str(batch_id)], sums[str(batch_id)] = out.agg(F.count("*"), F.sum(result)).first()
        return sink

    def totalling(self, df: Any, prefix: str, phase: str, emitted: dict[str, int]) -> Any:
        """Spark's side: the windowed aggregation ``df`` (append mode) into the same sink as
        statekit's, counting and summing its last column per micro-batch in one action."""
        self._sums = self.totals[f"{prefix}-{phase}"] = {}
        return (df.writeStream.outputMode("append").option("checkpointLocation", self.checkpoint(f"{prefix}-{phase}"))
                .foreachBatch(self.counting_sink(emitted, df.columns[-1])).trigger(availableNow=True).start())

    def total(self, prefix: str) -> int:
        """The sum of the results over the rows the timed job ``prefix`` emitted."""
        return sum(s or 0 for s in self.totals[f"{prefix}-timed"].values())


def run(n_rows: int = 200_000, backends: tuple[str, ...] = BACKENDS, spark: Any = None) -> list[dict]:
    """The three comparisons, each on ``n_rows`` rows (and the two that move the watermark)."""
    work = tempfile.mkdtemp(prefix="statekit-bench-windows-")
    active = spark or session()
    try:
        return _run(TotallingQueries(active, work), n_rows, backends)
    finally:
        if spark is None:
            active.stop()
        shutil.rmtree(work, ignore_errors=True)


def _later(spark: Any, key: str, *columns: str) -> list[Any]:
    """Two rows a day after the input, one per micro-batch: the watermark moves past every window
    of the input (statekit closes them in the second one's epoch, as of the first one's time)."""
    from pyspark.sql import functions as F

    return [spark.range(1).select(F.lit(0).cast("long").alias(key), *(F.lit(0).cast("long").alias(c) for c in columns),
                                  F.timestamp_seconds(F.lit(T0_SECONDS + 86_400 + offset)).alias("ts"))
            for offset in (0, 3600)]


def _run(queries: TotallingQueries, n_rows: int, backends: tuple[str, ...]) -> list[dict]:
    from pyspark.sql import functions as F

    spark = queries.spark

    def keyed(n: int) -> list[Any]:
        """``n`` rows ``(k, v, ts)``: ``ROWS_PER_KEY`` per key 6 seconds apart from ``START``, ``v = id % 10``."""
        keys = max(1, n // ROWS_PER_KEY)
        rows = spark.range(n).select((F.col("id") % keys).alias("k"), (F.col("id") % 10).alias("v"),
                                     F.timestamp_seconds(F.lit(START) + F.floor(F.col("id") / keys) * 6).alias("ts"))
        return [rows, *_later(spark, "k", "v")]

    def sessions(n: int) -> list[Any]:
        """Each user's events 0-40 minutes apart (so sessions both grow and close)."""
        users = max(1, n // 50)
        events = spark.range(n).select(
            (F.col("id") % users).alias("user"),
            F.timestamp_seconds(F.lit(T0_SECONDS) + F.floor(F.col("id") / users) * 600
                                + F.pmod(F.xxhash64("id"), F.lit(1800))).alias("ts"))
        return [events, *_later(spark, "user")]

    keyed_sources = queries.source("keyed-warm-up", keyed(WARM_UP)), queries.source("keyed", keyed(n_rows))
    keyed_schema = "k long, v long, ts timestamp"
    return (_compare(queries, "tumbling", keyed_sources, "k", keyed_schema, "built-in window",
                     lambda: windows.aggregate(windows.TumblingWindows.of("1 minute"), windows.Sum(), timestamp="ts",
                                               value="v"),
                     lambda df: df.groupBy(F.window("ts", "1 minute"), "k").agg(F.sum("v")),
                     n_rows, sum(i % 10 for i in range(n_rows)), backends)
            + _compare(queries, "sliding", keyed_sources, "k", keyed_schema, "built-in window",
                       lambda: windows.aggregate(windows.SlidingWindows.of("2 minutes", "1 minute"), windows.Count(),
                                                 timestamp="ts"),
                       lambda df: df.groupBy(F.window("ts", "2 minutes", "1 minute"), "k").count(),
                       n_rows, 2 * n_rows, backends)
            + _compare(queries, "sessions", (queries.source("sessions-warm-up", sessions(WARM_UP)),
                                             queries.source("sessions", sessions(n_rows))),
                       "user", "user long, ts timestamp", "built-in session_window",
                       lambda: windows.aggregate(windows.SessionWindows.with_gap(SESSION_GAP), windows.Count(),
                                                 timestamp="ts"),
                       lambda df: df.groupBy(F.session_window("ts", SESSION_GAP), "user").count(),
                       n_rows, n_rows, backends))


def _compare(queries: TotallingQueries, what: str, sources: tuple[str, str], key: str, schema: str, peer: str,
             operator: Callable[[], windows.WindowOperator], builtin: Callable[[Any], Any], n_rows: int,
             expected_total: int, backends: tuple[str, ...], **details: Any) -> list[dict]:
    """statekit's ``operator`` on each backend against Spark's ``builtin`` aggregation of the
    watermarked stream; ``expected_total``: the sum of the results over the input's windows."""
    emitted: dict[str, int] = {}
    output = f"{key} long, start timestamp, end timestamp, result long"
    sides = {f"statekit {backend}": queries.statekit(f"{what}-{backend}", backend, key, operator, schema, output,
                                                      emitted) for backend in backends}
    sides[peer] = lambda source, phase: queries.totalling(
        builtin(queries.stream(source, schema).withWatermark("ts", "0 seconds")), f"builtin-{what}", phase, emitted)
    seconds, outputs = timed(sides, *sources, emitted, ROUNDS)
    return [record(f"{what} {n_rows} rows: statekit {backend} vs {peer}", n_rows / seconds[f"statekit {backend}"],
                   n_rows / seconds[peer], "rows/s", group="windows", aim=1.0, backend=backend, peer_api=peer,
                   rows=n_rows, seconds=seconds[f"statekit {backend}"], peer_seconds=seconds[peer],
                   windows=outputs[f"statekit {backend}"], peer_windows=outputs[peer],
                   total=queries.total(f"{what}-{backend}"), peer_total=queries.total(f"builtin-{what}"),
                   expected_total=expected_total, **details)
            for backend in backends]


def main() -> None:
    sized_command(__doc__.splitlines()[0], run, "rows", 200_000)


if __name__ == "__main__":
    main()
