"""A Spark Connect client that runs a keyed job and ends without ``spark.stop()``, keeping the
job's result alive, as a short script does: it must exit (``connect_exit.py WORK``)."""
import faulthandler
import sys

from pyspark.sql import SparkSession

from statekit.conformance_tests.spark import OUTPUT, SCHEMA
from statekit.conformance_tests.workload import WorkloadFunction, make_rows
from statekit.spark import process_keyed

if __name__ == "__main__":
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    spark.conf.set("spark.statekit.checkpoint.storage", "filesystem")
    spark.conf.set("spark.statekit.checkpoint.dir", f"file://{sys.argv[1]}/checkpoints")
    spark.conf.set("spark.statekit.local.dir", f"{sys.argv[1]}/local")
    output = process_keyed(spark.createDataFrame(make_rows(100, 10, 1), SCHEMA), "key", WorkloadFunction(), OUTPUT,
                           job_id="exit")
    print("rows", output.count(), flush=True)
    faulthandler.dump_traceback_later(120, exit=True)  # a hung exit shows where it hangs, and ends
