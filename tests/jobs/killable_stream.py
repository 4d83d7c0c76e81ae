"""A streaming statekit query run as its own driver process, so a test can kill it with SIGKILL
and start it again from its Spark checkpoint.

    python killable_stream.py WORK BACKEND KILL

reads the JSON files in ``WORK/source`` one per micro-batch. ``KILL`` is ``none``, ``sink:B``
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

from statekit.conformance_tests.workload import WorkloadFunction  # noqa: E402
from statekit.spark import process_keyed_stream  # noqa: E402

SCHEMA = "key string, category string, amount long"


class KillDriverAfter(WorkloadFunction):
    """The workload; in epoch ``epoch`` it kills the driver process after ``rows`` rows."""

    def __init__(self, driver_pid: int, epoch: int, rows: int) -> None:
        self.driver_pid, self.kill_epoch, self.kill_rows = driver_pid, epoch, rows

    def open(self, ctx):
        super().open(ctx)
        self.rows = 0

    def process(self, row, ctx):
        self.rows += 1
        if ctx.checkpoint_id == self.kill_epoch and self.rows == self.kill_rows:
            os.kill(self.driver_pid, signal.SIGKILL)
        yield from super().process(row, ctx)


def main(work: str, backend: str, kill: str) -> None:
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
    function = (KillDriverAfter(os.getpid(), kill_batch + 1, 100) if where == "task" else WorkloadFunction())

    def sink(out, batch_id):
        out.write.mode("overwrite").parquet(f"{work}/output/batch-{batch_id}")  # idempotent by batch id
        if where == "sink" and batch_id == kill_batch:
            os.kill(os.getpid(), signal.SIGKILL)

    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(f"{work}/source")
    process_keyed_stream(stream, "key", function, "key string, count long", sink,
                         checkpoint_location=f"{work}/spark-checkpoint", job_id="killable",
                         trigger={"availableNow": True}).awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
