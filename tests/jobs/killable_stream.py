"""A streaming statekit query run as its own driver process, so a test can kill it with SIGKILL
and start it again from its Spark checkpoint.

    python killable_stream.py WORK BACKEND KILL [JOB [SINK [MASTER [NAME=VALUE ...]]]]

reads the JSON files in ``WORK/source`` one per micro-batch. ``JOB`` is ``workload`` (the
default: ``conformance_tests.workload``) or ``timers`` (``conformance_tests.timer_workload``: event-time
windows closed by timers, with ``event_time="ts"``). ``SINK`` is ``overwrite`` (the default: a
function writing ``WORK/output/batch-<b>``, idempotent by batch id), ``append`` (a function
appending to ``WORK/output``: at least once), ``parquet`` (``ParquetFileSink`` on ``WORK/output``),
``sqlite`` (``SqliteWriteAheadSink`` on ``WORK/output.sqlite``) or ``postgres:<table>:<conninfo>``
(``PostgresSink``). Each ``NAME=VALUE`` sets ``spark.statekit.NAME`` (e.g. ``parallelism=3``,
``restore.path=<savepoint>``) over the defaults (parallelism 2, incremental checkpoints in
``WORK/checkpoints``). ``KILL`` is ``none`` or ``<point>:B`` for micro-batch B:

- ``task``: a task kills the driver after processing some rows (the checkpoint never completes);
- ``sink``: the driver kills itself in a sink function (statekit committed the epoch's checkpoint,
  Spark has not committed the batch);
- ``precommit``: a task kills the driver right after pre-committing its transaction;
- ``checkpoint``: the driver kills itself once the checkpoint is complete, before the commit;
- ``commit``: the driver kills itself after committing (publishing) the first subtask's output.
"""
import os
import signal
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

from pyspark.sql import SparkSession  # noqa: E402

from statekit.conformance_tests.timer_workload import WATERMARK_DELAY, WindowCountFunction  # noqa: E402
from statekit.conformance_tests.workload import WorkloadFunction  # noqa: E402
from statekit.sinks import ParquetFileSink, PostgresSink, SqliteWriteAheadSink  # noqa: E402
from statekit.spark import process_keyed_stream  # noqa: E402

SCHEMA = "key string, category string, amount long"


class KillDriver:
    """Mixed into a function: in epoch ``epoch`` it kills the driver process after ``rows`` rows."""

    def __init__(self, driver_pid: int, epoch: int, rows: int) -> None:
        self.driver_pid, self.kill_epoch, self.kill_rows = driver_pid, epoch, rows

    def open(self, ctx):
        super().open(ctx)
        self.rows = 0

    def process(self, row, ctx):
        self.rows += 1
        if ctx.checkpoint_id == self.kill_epoch and self.rows == self.kill_rows:
            os.kill(self.driver_pid, signal.SIGKILL)
        return super().process(row, ctx)


class WorkloadKillingDriver(KillDriver, WorkloadFunction):
    pass


class TimersKillingDriver(KillDriver, WindowCountFunction):
    pass


class KillingSink:
    """Mixed into a sink: kills the driver at ``point`` of epoch ``epoch``."""

    def __init__(self, *args, driver_pid: int, point: str, epoch: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.driver_pid, self.point, self.kill_epoch = driver_pid, point, epoch

    def _kill_at(self, point: str, epoch: int) -> None:
        if point == self.point and epoch == self.kill_epoch:
            try:
                os.kill(self.driver_pid, signal.SIGKILL)
            except ProcessLookupError:  # another subtask was first
                pass

    def pre_commit(self, transaction):
        record = super().pre_commit(transaction)
        self._kill_at("precommit", transaction.context.epoch)
        return record

    def commit(self, record):
        epoch = int(record["id"].split("~")[-4])  # statekit~job~operator~epoch~subtask~run~attempt
        self._kill_at("checkpoint", epoch)
        super().commit(record)
        self._kill_at("commit", epoch)

    def publish(self, context, batches):
        self._kill_at("checkpoint", context.epoch)
        super().publish(context, batches)
        self._kill_at("commit", context.epoch)


class KillingParquetSink(KillingSink, ParquetFileSink):
    pass


class KillingPostgresSink(KillingSink, PostgresSink):
    pass


class KillingSqliteSink(KillingSink, SqliteWriteAheadSink):
    pass


JOBS = {  # input schema, function class, the same killing the driver, output schema, extra arguments
    "workload": (SCHEMA, WorkloadFunction, WorkloadKillingDriver, "key string, count long", {}),
    "timers": ("key string, ts long", WindowCountFunction, TimersKillingDriver, "kind string, key string, ts long, n long",
               {"event_time": "ts", "watermark_delay": WATERMARK_DELAY}),
}


def main(work: str, backend: str, kill: str, job: str = "workload", sink_kind: str = "overwrite",
         master: str = "local[2]", *settings: str) -> None:
    where, _, batch = kill.partition(":")
    kill_batch = int(batch) if batch else -1
    builder = (SparkSession.builder.master(master).appName("killable-stream")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
               .config("spark.statekit.backend", backend).config("spark.statekit.checkpoint.storage", "filesystem")
               .config("spark.statekit.checkpoint.dir", f"file://{work}/checkpoints")
               .config("spark.statekit.checkpoint.incremental", "true").config("spark.statekit.parallelism", "2")
               .config("spark.statekit.local.dir", f"{work}/local"))
    for setting in settings:
        name, _, value = setting.partition("=")
        builder = builder.config(f"spark.statekit.{name}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    schema, function_class, killing_class, output, arguments = JOBS[job]
    function = killing_class(os.getpid(), kill_batch + 1, 100) if where == "task" else function_class()
    killing = {"driver_pid": os.getpid(), "point": where, "epoch": kill_batch + 1}

    def overwrite(out, batch_id):
        out.write.mode("overwrite").parquet(f"{work}/output/batch-{batch_id}")  # idempotent by batch id
        if where == "sink" and batch_id == kill_batch:
            os.kill(os.getpid(), signal.SIGKILL)

    def append(out, batch_id):
        out.write.mode("append").parquet(f"{work}/output")  # at least once: a replay appends again
        if where == "sink" and batch_id == kill_batch:
            os.kill(os.getpid(), signal.SIGKILL)

    if sink_kind == "overwrite":
        sink = overwrite
    elif sink_kind == "append":
        sink = append
    elif sink_kind == "parquet":
        sink = KillingParquetSink(f"file://{work}/output", **killing)
    elif sink_kind == "sqlite":
        sink = KillingSqliteSink(f"{work}/output.sqlite", "output", **killing)
    elif sink_kind.startswith("postgres:"):
        _, table, conninfo = sink_kind.split(":", 2)
        sink = KillingPostgresSink(conninfo, table, **killing)
    else:
        raise SystemExit(f"unknown sink {sink_kind!r}")
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(f"{work}/source")
    process_keyed_stream(stream, "key", function, output, sink, checkpoint_location=f"{work}/spark-checkpoint",
                         job_id="killable", trigger={"availableNow": True}, **arguments).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
