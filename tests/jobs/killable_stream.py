"""A streaming statekit query run as its own driver process, so a test can kill it with SIGKILL
and start it again from its Spark checkpoint.

    python killable_stream.py WORK BACKEND KILL [JOB]

reads the JSON files in ``WORK/source`` one per micro-batch. ``JOB`` is ``workload`` (the
default: ``conformance_tests.workload``) or ``timers`` (``conformance_tests.timer_workload``: event-time
windows closed by timers, with ``event_time="ts"``). ``KILL`` is ``none``, ``sink:B``
(the driver kills itself in the sink of micro-batch B: statekit committed the epoch's checkpoint,
Spark has not committed the batch) or ``task:B`` (a task of micro-batch B kills the driver after
processing some rows: the epoch's checkpoint never completes).
"""
import os
import signal
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

from pyspark.sql import SparkSession  # noqa: E402

from statekit.conformance_tests.timer_workload import WATERMARK_DELAY, WindowCountFunction  # noqa: E402
from statekit.conformance_tests.workload import WorkloadFunction  # noqa: E402
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


JOBS = {  # input schema, function class, the same killing the driver, output schema, extra arguments
    "workload": (SCHEMA, WorkloadFunction, WorkloadKillingDriver, "key string, count long", {}),
    "timers": ("key string, ts long", WindowCountFunction, TimersKillingDriver, "kind string, key string, ts long, n long",
               {"event_time": "ts", "watermark_delay": WATERMARK_DELAY}),
}


def main(work: str, backend: str, kill: str, job: str = "workload") -> None:
    where, _, batch = kill.partition(":")
    kill_batch = int(batch) if batch else -1
    spark = (SparkSession.builder.master("local[2]").appName("killable-stream")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.statekit.backend", backend).config("spark.statekit.checkpoint.storage", "filesystem")
             .config("spark.statekit.checkpoint.dir", f"file://{work}/checkpoints")
             .config("spark.statekit.checkpoint.incremental", "true").config("spark.statekit.parallelism", "2")
             .config("spark.statekit.local.dir", f"{work}/local").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema, function_class, killing_class, output, arguments = JOBS[job]
    function = killing_class(os.getpid(), kill_batch + 1, 100) if where == "task" else function_class()

    def sink(out, batch_id):
        out.write.mode("overwrite").parquet(f"{work}/output/batch-{batch_id}")  # idempotent by batch id
        if where == "sink" and batch_id == kill_batch:
            os.kill(os.getpid(), signal.SIGKILL)

    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(f"{work}/source")
    process_keyed_stream(stream, "key", function, output, sink, checkpoint_location=f"{work}/spark-checkpoint",
                         job_id="killable", trigger={"availableNow": True}, **arguments).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
