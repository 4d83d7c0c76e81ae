"""Timers under Spark (local[2]), on the same data in the same run: every row registers an
event-time timer at its own timestamp, and a second micro-batch moves the watermark past all of
them, so each fires once and emits a row. statekit (each backend; a ``KeyedBatchFunction``
registering its key's timers, ``on_timer`` emitting) against ``transformWithStateInPandas`` in
event-time mode (``registerTimer`` per row, ``handleExpiredTimer`` emitting). Record: timer
operations (registrations + firings) per second. ``Queries`` and ``timed`` serve the windows
section too (``benchmarks.windows``).

Both sides read the same Parquet files one per micro-batch (trigger ``availableNow``), with a
watermark delay of 0, and run untimed on a small input first (JVM and Python worker warm-up).

    python -m benchmarks.timers [--timers 20000] [--json FILE]
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, Callable, Iterator

import pandas as pd

from benchmarks.fixtures import BACKENDS, sized_command
from benchmarks.report import record
from benchmarks.spark_keyed import session
from statekit.runtime import KeyedBatchFunction

T0_SECONDS = 1_700_000_000
WARM_UP = 2_000


class RegisterEachRow(KeyedBatchFunction):
    """A timer at each row's event time; each timer emits (key, timestamp) when it fires."""

    def process_rows(self, key: Any, rows: Any, ctx: Any) -> None:
        import pyarrow.compute as pc

        register = ctx.timer_service().register_event_time_timer
        for micros in pc.cast(rows.column("ts"), "int64").to_pylist():
            register(micros // 1000)

    def on_timer(self, timestamp: int, ctx: Any) -> tuple[tuple[int, int]]:
        return ((ctx.current_key, timestamp),)


def run(n_timers: int = 20_000, backends: tuple[str, ...] = BACKENDS, spark: Any = None) -> list[dict]:
    work = tempfile.mkdtemp(prefix="statekit-bench-timers-")
    active = spark or session()
    try:
        return _timers(active, work, n_timers, backends)
    finally:
        if spark is None:
            active.stop()
        shutil.rmtree(work, ignore_errors=True)


class Queries:
    """The Parquet sources, Spark checkpoints and statekit settings of one run."""

    def __init__(self, spark: Any, work: str) -> None:
        self.spark, self.work = spark, work

    def source(self, name: str, batches: list[Any]) -> str:
        """One Parquet file per DataFrame of ``batches``, read back one per micro-batch."""
        path = os.path.join(self.work, name)
        for number, df in enumerate(batches):
            df.coalesce(1).write.parquet(os.path.join(path, f"batch-{number}"))
        return path

    def stream(self, source: str, schema: str) -> Any:
        return (self.spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
                .option("recursiveFileLookup", "true").parquet(source))

    def checkpoint(self, name: str) -> str:
        return os.path.join(self.work, "spark-checkpoints", name)

    def counting_sink(self, emitted: dict[str, int]) -> Callable[[Any, int], None]:
        def sink(out: Any, batch_id: int) -> None:
            emitted[str(batch_id)] = out.count()
        return sink

    def use(self, backend: str, name: str) -> None:
        """statekit's settings for the job ``name`` on ``backend``: its own checkpoint directory."""
        for option, value in {"backend": backend, "checkpoint.storage": "filesystem", "parallelism": "2",
                              "checkpoint.dir": f"file://{self.work}/statekit-{name}", "checkpoint.incremental": "true",
                              "local.dir": os.path.join(self.work, "local")}.items():
            self.spark.conf.set(f"spark.statekit.{option}", value)

    def statekit(self, prefix: str, backend: str, key: str, function: Callable[[], Any], schema: str, output: str,
                 emitted: dict[str, int]) -> Callable[[str, str], Any]:
        """Starts statekit's query on ``backend`` over a source (event time ``ts``, watermark delay 0)
        for a phase ("warm-up" or "timed"), counting its output rows into ``emitted``."""
        from statekit.spark import process_keyed_stream

        def start(source: str, phase: str) -> Any:
            name = f"{prefix}-{phase}"
            self.use(backend, name)
            return process_keyed_stream(self.stream(source, schema), key, function(), output,
                                        self.counting_sink(emitted), job_id=name, event_time="ts",
                                        watermark_delay="0 ms", checkpoint_location=self.checkpoint(name),
                                        trigger={"availableNow": True})
        return start

    def noop(self, df: Any, name: str, mode: str) -> Any:
        return (df.writeStream.format("noop").outputMode(mode).option("checkpointLocation", self.checkpoint(name))
                .trigger(availableNow=True).start())


def timed(sides: dict[str, Callable[[Any, str], Any]], warm_up: Any, source: Any,
          emitted: dict[str, int], rounds: int = 1) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds of each side's timed query (the best of ``rounds``, interleaved, after every side's
    warm-up), and the rows its first timed query emitted: statekit's sinks count into ``emitted``;
    a peer's are its progress reports' sink rows. Round ``r`` runs as phase ``timed`` (the first)
    or ``timed-<r>``: a query of its own, from a checkpoint of its own."""
    for start in sides.values():
        start(warm_up, "warm-up").awaitTermination()
    seconds: dict[str, float] = {}
    outputs: dict[str, int] = {}
    for number in range(1, rounds + 1):
        for name, start in sides.items():
            emitted.clear()
            started = time.perf_counter()
            query = start(source, "timed" if number == 1 else f"timed-{number}")
            query.awaitTermination()
            seconds[name] = min(seconds.get(name, float("inf")), time.perf_counter() - started)
            if number == 1:
                reported = [p["sink"].get("numOutputRows", -1) for p in query.recentProgress]
                outputs[name] = sum(emitted.values()) if emitted else sum(n for n in reported if n > 0)
    return seconds, outputs


def _timers(spark: Any, work: str, n_timers: int, backends: tuple[str, ...]) -> list[dict]:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    queries = Queries(spark, work)
    emitted: dict[str, int] = {}
    schema, output = "k long, ts timestamp", "k long, fired long"
    keys = max(1, n_timers // 10)

    def rows(n: int) -> list[Any]:
        """``n`` rows at distinct milliseconds, then one row far later that moves the watermark."""
        timed = spark.range(n).select((F.col("id") % keys).alias("k"),
                                      F.timestamp_millis(F.col("id") + T0_SECONDS * 1000).alias("ts"))
        later = spark.range(1).select(F.lit(0).cast("long").alias("k"),
                                      F.timestamp_millis(F.lit((T0_SECONDS + 86_400) * 1000)).alias("ts"))
        return [timed, later]

    class TwsTimerPerRow(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.handle = handle

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            for pdf in rows:
                for stamp in pdf["ts"]:
                    self.handle.registerTimer(int(stamp.value // 1_000_000))
            return iter(())

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
            yield pd.DataFrame({"k": [key[0]], "fired": [expiredTimerInfo.getExpiryTimeInMs()]})

        def close(self) -> None:
            pass

    sides = {f"statekit {backend}": queries.statekit(f"timers-{backend}", backend, "k", RegisterEachRow, schema,
                                                      output, emitted) for backend in backends}
    sides["transformWithStateInPandas"] = lambda source, phase: queries.noop(
        queries.stream(source, schema).withWatermark("ts", "0 seconds").groupBy("k").transformWithStateInPandas(
            TwsTimerPerRow(), output, "Append", "EventTime"), f"tws-timers-{phase}", "append")
    seconds, outputs = timed(sides, queries.source("timers-warm-up", rows(WARM_UP)),
                              queries.source("timers", rows(n_timers)), emitted)
    operations = 2 * n_timers  # each timer registered once and fired once
    peer = "transformWithStateInPandas"
    return [record(f"timers {n_timers} register+fire: statekit {backend} vs {peer}",
                   operations / seconds[f"statekit {backend}"], operations / seconds[peer], "ops/s", group="timers",
                   backend=backend, peer_api=peer, timers=n_timers, keys=keys,
                   seconds=seconds[f"statekit {backend}"], peer_seconds=seconds[peer],
                   fired=outputs[f"statekit {backend}"], peer_fired=outputs[peer])
            for backend in backends]


def main() -> None:
    sized_command(__doc__.splitlines()[0], run, "timers", 20_000)


if __name__ == "__main__":
    main()
