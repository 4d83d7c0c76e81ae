"""The conformance suite's Spark level on ``local-cluster[2,1,1024]``: two executors in separate
JVMs, each with its own Python workers, so state really moves between processes (checkpoints,
a failed and retried task, restarts, a replayed micro-batch, rescale 4 -> 3 -> 8 -> 2, backend
switches through savepoints), every result compared with the oracle.

A SparkContext per process: each backend runs the one command in a subprocess."""
import re
import subprocess
import sys

import pytest

from spark_processes import short_job_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]
MASTER = "local-cluster[2,1,1024]"


@pytest.mark.parametrize("backend,storage", [("heap", "jobmanager"), ("rocksdb", "filesystem"),
                                             ("lmdb", "filesystem")])
def test_spark_level_on_separate_executor_processes(backend, storage):
    run = subprocess.run([sys.executable, "-m", "statekit.conformance_tests", "--backend", backend,
                          "--storage", storage, "--level", "spark", "--spark-master", MASTER, "-q",
                          "-p", "no:cacheprovider"], env=short_job_env(), capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0 and "statekit conformance: PASSED" in run.stdout, run.stdout[-5000:] + run.stderr[-3000:]
    spark = re.search(r"^spark\s+(\d+)\s+(\d+)\s+(\d+)\s*$", run.stdout, re.MULTILINE)
    assert spark is not None and int(spark.group(1)) >= 12 and spark.group(2) == spark.group(3) == "0", \
        run.stdout[-3000:]
