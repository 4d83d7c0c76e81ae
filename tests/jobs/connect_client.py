"""Every statekit entry point driven by a Spark Connect client: a process of its own that starts a
local Connect server with ``SparkSession.builder.remote(MASTER)`` (the server runs in a JVM this
process starts; the client reaches it only through gRPC).

    python connect_client.py WORK PHASE [MASTER]

``PHASE`` ``first`` runs the first epochs of each job, ``second`` continues them in a new client
and server (a restart of both): a rescale, a backend switch through the first phase's savepoint
and a restarted streaming query. Each step's result (or its error) goes into
``WORK/PHASE.json``; the test compares them with plain-Python oracles and a classic session's run.
"""
import json
import os
import sys
import traceback
from pathlib import Path

os.environ["PYSPARK_PYTHON"] = sys.executable  # the server's Python workers: this environment's
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession, functions as F  # noqa: E402

import connect_jobs as jobs  # noqa: E402
from killable import write_micro_batches  # noqa: E402
from statekit.conformance_tests.spark import OUTPUT, SCHEMA  # noqa: E402
from statekit.conformance_tests.timer_workload import EPOCH_MS, T0, WATERMARK_DELAY, WindowCountFunction  # noqa: E402
from statekit.conformance_tests.workload import WorkloadFunction, WorkloadVectorFunction  # noqa: E402
from statekit.sinks import ParquetFileSink  # noqa: E402
from statekit.spark import (  # noqa: E402
    latest_checkpoint, process_keyed, process_keyed_stream, savepoint, write_savepoint,
)


def _rows(df) -> list:
    return [list(row) for row in df.collect()]


class Steps:
    def __init__(self, spark, work: Path) -> None:
        self.spark, self.work, self.results = spark, work, {}

    def run(self, name, step) -> None:
        try:
            self.results[name] = {"result": step()}
        except Exception as exc:  # noqa: BLE001 - recorded: the test fails the entry point's test with it
            self.results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}

    def configure(self, **settings) -> None:
        for name, value in {**jobs.settings(self.work), **settings}.items():
            self.spark.conf.set(f"spark.statekit.{name}", str(value))
        for name in ("restore.path", "parallelism", "backend"):
            if name not in settings:
                self.spark.conf.unset(f"spark.statekit.{name}")

    def keyed(self, job: str, epochs: list, function=None, **settings) -> list:
        self.configure(**settings)
        outputs = []
        for rows in epochs:
            df = self.spark.createDataFrame(rows, SCHEMA).coalesce(1)  # one partition: rows in the oracle's order
            outputs.append(_rows(process_keyed(df, "key", function or WorkloadFunction(), OUTPUT, job_id=job)))
        return outputs

    def stream(self, job: str, source: Path, sink, **extra):
        """Run a query to its end; the id of its last micro-batch."""
        query = self.finished_query(job, source, sink, **extra)
        return query.lastProgress["batchId"] if query.lastProgress else None

    def finished_query(self, job: str, source: Path, sink, **extra):
        stream = self.spark.readStream.schema(extra.pop("schema", SCHEMA)).option("maxFilesPerTrigger", 1).json(
            str(source))
        query = process_keyed_stream(stream, "key", extra.pop("function", WorkloadFunction()),
                                     extra.pop("output", OUTPUT), sink,
                                     checkpoint_location=str(self.work / f"query-{job}"), job_id=job,
                                     trigger={"availableNow": True}, **extra)
        query.awaitTermination(600)
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        return query


def first(steps: Steps) -> None:
    spark, work = steps.spark, steps.work
    epochs = jobs.epochs()
    steps.run("keyed", lambda: steps.keyed("keyed", epochs[:2], parallelism=2, backend="rocksdb"))
    steps.run("latest_checkpoint", lambda: latest_checkpoint(spark, "keyed")[0].checkpoint_id)
    steps.run("savepoint", lambda: savepoint(spark, "keyed"))

    def defaults():  # no parallelism and no job id set: Spark's default parallelism, the application name
        steps.configure()
        process_keyed(spark.createDataFrame(epochs[0], SCHEMA), "key", WorkloadFunction(), OUTPUT).collect()
        latest, _ = latest_checkpoint(spark, "statekit-connect")
        return latest.metadata.operator("keyed-process").parallelism
    steps.run("defaults", defaults)
    def worker_error():  # a statekit error raised in a task reaches the client as itself
        steps.configure(parallelism=2)
        process_keyed(spark.createDataFrame(epochs[0][:10], SCHEMA), "key", jobs.WrongType(), OUTPUT,
                      job_id="wrong-type").collect()
    steps.run("worker_error", worker_error)
    steps.run("vector", lambda: steps.keyed("vector", epochs[:2], WorkloadVectorFunction(), parallelism=2))

    def pre_aggregated():
        steps.configure(parallelism=2)
        df = spark.createDataFrame(epochs[0], SCHEMA)
        out = process_keyed(df, "key", jobs.PreAggregatedCounts(), jobs.PRE_AGGREGATED_OUTPUT, job_id="pre-aggregated",
                            pre_aggregate={"n": F.count("*"), "amount_sum": F.sum("amount")})
        return _rows(out)
    steps.run("pre_aggregation", pre_aggregated)

    def timers():
        steps.configure(parallelism=2)
        outputs = []
        for number, rows in enumerate(jobs.timed_epochs()):
            df = spark.createDataFrame(rows, jobs.TIMED_INPUT)
            outputs.append(_rows(process_keyed(df, "key", WindowCountFunction(), jobs.TIMED_OUTPUT, job_id="timers",
                                               event_time="ts", watermark_delay=WATERMARK_DELAY,
                                               processing_time_ms=T0 + number * EPOCH_MS)))
        return outputs
    steps.run("timers", timers)

    def bootstrap():
        steps.configure(parallelism=2)
        initial = spark.createDataFrame(jobs.BOOTSTRAP, "key string, total long")
        url = write_savepoint(initial, "key", {"total": jobs.TOTAL}, job_id="bootstrapped",
                              savepoint_dir=(work / "bootstrap").as_uri(), parallelism=3)
        steps.configure(parallelism=2, **{"restore.path": url})
        df = spark.createDataFrame(jobs.BOOTSTRAP_INPUT, "key string, amount long")
        out = _rows(process_keyed(df, "key", jobs.AddToTotal(), "key string, total long", job_id="bootstrapped"))
        state = _rows(spark.read.format("statekit").option("state", "total").load(url).select("key", "value"))
        return {"url": url, "output": out, "state": state}
    steps.run("write_savepoint", bootstrap)

    def metadata():
        rows = spark.read.format("statekit-metadata").load((work / "checkpoints" / "keyed").as_uri())
        return _rows(rows.select("checkpoint_id", "backend", "parallelism").distinct())
    steps.run("metadata_source", metadata)

    def state_source():
        state = spark.read.format("statekit").load((work / "checkpoints" / "keyed").as_uri())
        return _rows(state.groupBy("state").count())
    steps.run("state_source", state_source)

    steps.configure()  # the streams' parallelism: Spark's default (2), kept after the restart
    write_micro_batches(work / "sink", epochs[:2])
    steps.run("stream_sink", lambda: steps.stream("stream-sink", work / "sink" / "source",
                                                  ParquetFileSink(str(work / "sink-output"))))
    write_micro_batches(work / "function", epochs[:2])
    function_output = str(work / "function-output")
    steps.run("stream_function", lambda: steps.stream(
        "stream-function", work / "function" / "source",
        lambda out, batch_id: out.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(function_output)))

    def stream_progress():  # statekit's metrics in the progress of each micro-batch the query ran
        query = steps.finished_query("stream-progress", work / "function" / "source", lambda out, batch_id: None)
        return [{"batch_id": p.batchId, **{name: p.observedMetrics["statekit"][name] for name in jobs.PROGRESS_FIELDS}}
                for p in query.recentProgress if "addBatch" in p.durationMs]
    steps.run("stream_progress", stream_progress)
    write_micro_batches(work / "timed", jobs.timed_epochs(), columns=("key", "ts"))
    timed_output = str(work / "timed-output")
    steps.run("stream_event_time", lambda: steps.stream(
        "stream-timed", work / "timed" / "source", lambda out, batch_id: out.write.mode("append").parquet(timed_output),
        schema=jobs.TIMED_INPUT, function=WindowCountFunction(), output=jobs.TIMED_OUTPUT, event_time="ts",
        watermark_delay=WATERMARK_DELAY))

    def jobmanager():
        steps.configure(**{"checkpoint.storage": "jobmanager"})
        spark.conf.unset("spark.statekit.checkpoint.dir")
        try:
            steps.stream("stream-jobmanager", work / "sink" / "source", lambda out, batch_id: None)
        finally:
            steps.configure()
    steps.run("jobmanager_refused", jobmanager)


def second(steps: Steps) -> None:
    work, epochs = steps.work, jobs.epochs()
    steps.run("keyed", lambda: steps.keyed("keyed", epochs[2:], parallelism=3, backend="rocksdb"))
    url = json.loads((work / "first.json").read_text())["savepoint"]["result"]
    steps.run("backend_switch", lambda: steps.keyed("switched", epochs[2:], parallelism=3, backend="heap",
                                                    **{"restore.path": url}))
    steps.configure()
    write_micro_batches(work / "sink", epochs[2:], start=2)
    steps.run("stream_sink", lambda: steps.stream("stream-sink", work / "sink" / "source",
                                                  ParquetFileSink(str(work / "sink-output"))))


cloudpickle.register_pickle_by_value(jobs)  # the server's Python workers need not import the tests


def main(work: str, phase: str, master: str = "local[2]") -> None:
    spark = (SparkSession.builder.remote(master).appName("statekit-connect")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    steps = Steps(spark, Path(work))
    try:
        {"first": first, "second": second}[phase](steps)
    finally:
        (Path(work) / f"{phase}.json").write_text(json.dumps(steps.results))
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
