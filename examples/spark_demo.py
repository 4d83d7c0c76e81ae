"""Sensor alerts on Spark with statekit: the main example (``make demo``).

1. A streaming query reads sensor readings from a local directory (one file per micro-batch)
   and keeps per-sensor state in the heap backend at parallelism 4, with one incremental
   checkpoint per micro-batch in a local checkpoint directory.
2. A savepoint is taken of the last checkpoint.
3. A new job restores the savepoint into the RocksDB backend at parallelism 3 and processes
   the next batch of readings.
4. Every sensor's state, read back with ``spark.read.format("statekit")``, is compared with a
   plain-Python recomputation of all readings, and the ``statekit`` command describes the last
   checkpoint and looks up one sensor's count in it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sensors  # noqa: E402
from sensors import SensorAlerts, matches, read_state, readings, recompute  # noqa: E402

STATEKIT = os.path.join(os.path.dirname(sys.executable), "statekit")  # the console script beside this Python

SCHEMA = "sensor string, hour long, temperature double"
OUTPUT = "sensor string, alert string, temperature double"


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    from statekit.spark import process_keyed, process_keyed_stream, savepoint

    cloudpickle.register_pickle_by_value(sensors)  # executors need not import the example module
    started = time.perf_counter()
    work = tempfile.mkdtemp(prefix="statekit-demo-")
    master = os.environ.get("STATEKIT_DEMO_MASTER", "local[2]")  # e.g. local-cluster[2,1,1024]
    spark = (SparkSession.builder.master(master).appName("statekit-demo")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        settings = {"backend": "heap", "checkpoint.storage": "filesystem",
                    "checkpoint.dir": f"file://{work}/checkpoints", "checkpoint.incremental": "true",
                    "parallelism": "4", "savepoint.dir": f"file://{work}/savepoints"}
        for name, value in settings.items():
            spark.conf.set(f"spark.statekit.{name}", value)
        # one file per batch: Spark reads a small file as one partition, so each sensor's readings
        # reach the function in file order, the order the recomputation assumes
        source, later = os.path.join(work, "readings"), os.path.join(work, "later")
        batches = [readings(epoch, n=10_000) for epoch in (1, 2, 3, 4)]
        for epoch, batch in enumerate(batches, start=1):
            directory = source if epoch <= 3 else later
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"readings-{epoch}.json")
            with open(path, "w") as f:
                f.writelines(json.dumps({"sensor": s, "hour": h, "temperature": t}) + "\n" for s, h, t in batch)
            os.utime(path, (1_700_000_000 + epoch,) * 2)  # the file source takes the oldest file first
        print(f"statekit on Spark ({master}): sensor alerts from a streaming file source, heap backend, "
              f"parallelism 4, incremental checkpoints to a local directory")

        alerts_per_batch = []

        def sink(alerts, batch_id):
            alerts_per_batch.append((batch_id, alerts.count()))

        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(source)
        process_keyed_stream(stream, "sensor", SensorAlerts(), OUTPUT, sink, job_id="sensors",
                             checkpoint_location=os.path.join(work, "query-checkpoint"),
                             trigger={"availableNow": True}).awaitTermination()
        for batch_id, count in alerts_per_batch:
            print(f"  micro-batch {batch_id}: 10,000 readings, {count} alerts, checkpoint {batch_id + 1} complete")

        savepoint_url = savepoint(spark, "sensors")
        print(f"savepoint written: {os.path.relpath(savepoint_url.replace('file://', ''), work)}")

        spark.conf.set("spark.statekit.backend", "rocksdb")
        spark.conf.set("spark.statekit.parallelism", "3")
        spark.conf.set("spark.statekit.restore.path", savepoint_url)
        df = spark.read.schema(SCHEMA).json(later)
        alerts = process_keyed(df, "sensor", SensorAlerts(), OUTPUT, job_id="sensors-rocksdb").count()
        print(f"restored into the rocksdb backend at parallelism 3: 10,000 more readings, {alerts} alerts")

        job = f"file://{work}/checkpoints/sensors-rocksdb"
        expected = recompute([r for batch in batches for r in batch])
        mismatches = matches(read_state(spark, job), expected)  # the job's latest checkpoint
        if mismatches:
            raise SystemExit(f"FAILED: {len(mismatches)} sensors differ from the recomputation, "
                             f"e.g. {mismatches[:3]}")
        print(f"OK: all {len(expected)} sensors' count, recent readings, hourly maxima and mean match a "
              f"plain-Python recomputation after streaming checkpoints, a savepoint, a switch to RocksDB and "
              f"rescale 4 -> 3 ({time.perf_counter() - started:.0f} s)")

        print(f"$ statekit checkpoints describe {job.replace(work, '<work>')}", flush=True)
        subprocess.run([STATEKIT, "checkpoints", "describe", job], check=True)
        sensor = min(expected)
        lookup = subprocess.run([STATEKIT, "state", "get", job, "--state", "count", "--key", sensor, "--json"],
                                check=True, capture_output=True, text=True).stdout
        print(f"$ statekit state get ... --state count --key {sensor} --json\n{lookup.strip()}")
        if json.loads(lookup)["value"] != expected[sensor]["count"]:
            raise SystemExit(f"FAILED: statekit state get gave {lookup!r}, {expected[sensor]['count']} was due")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
