"""One bounded epoch of the workload (``process_keyed``) run by a driver process of its own, so a
test can have the driver killed (SIGKILL) right after statekit committed the epoch's checkpoint.

    python bounded_epoch.py ROWS OUTPUT JOB KILL [NAME=VALUE ...]

processes the rows in the JSON file ``ROWS`` (a list of ``[key, category, amount]``, in order) as
job ``JOB``'s next epoch on ``local[2,3]``, with ``spark.statekit.NAME=VALUE`` for each setting,
and writes the output rows (``[key, count]``) to the JSON file ``OUTPUT``. ``KILL`` is ``none`` or
``after-commit``: the driver kills itself once ``process_keyed`` returned, i.e. after the epoch's
``_metadata`` was written and before anything else happens.
"""
import json
import os
import signal
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

from pyspark.sql import SparkSession  # noqa: E402

from statekit.conformance_tests.spark import OUTPUT, SCHEMA  # noqa: E402
from statekit.conformance_tests.workload import WorkloadFunction  # noqa: E402
from statekit.spark import process_keyed  # noqa: E402


def main(rows_file: str, output_file: str, job_id: str, kill: str, *settings: str) -> None:
    if kill not in ("none", "after-commit"):
        raise SystemExit(f"KILL is none or after-commit, got {kill!r}")
    builder = (SparkSession.builder.master("local[2,3]").appName("bounded-epoch")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable))
    for setting in settings:
        name, _, value = setting.partition("=")
        builder = builder.config(f"spark.statekit.{name}", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    with open(rows_file) as f:
        rows = [tuple(row) for row in json.load(f)]
    df = spark.createDataFrame(rows, SCHEMA).coalesce(1)  # one partition: rows in the oracle's order
    out = process_keyed(df, "key", WorkloadFunction(), OUTPUT, job_id=job_id).collect()
    with open(output_file, "w") as f:
        json.dump([[r["key"], r["count"]] for r in out], f)
    if kill == "after-commit":
        os.kill(os.getpid(), signal.SIGKILL)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
