"""The environment of a short Spark job that a test runs as a process of its own (a driver it
kills, an example script, the conformance command): such a job lives a minute at most and runs
small Spark jobs, so its JVMs (the driver, and a ``local-cluster``'s executors) compile with C1
only (``-XX:TieredStopAtLevel=1``), which starts them and runs those jobs faster than C2 would;
the suite's own long-lived SparkSession keeps the JVM's default. A ``PYSPARK_SUBMIT_ARGS``
already in the environment is kept."""
from __future__ import annotations

import os

C1_ONLY = "-XX:TieredStopAtLevel=1"
QUICK_JVMS = f"--driver-java-options {C1_ONLY} --conf spark.executor.extraJavaOptions={C1_ONLY} pyspark-shell"


def short_job_env(**overrides: str) -> dict[str, str]:
    """``os.environ`` with ``overrides``, and quick-starting JVMs unless ``PYSPARK_SUBMIT_ARGS`` is set."""
    return {"PYSPARK_SUBMIT_ARGS": QUICK_JVMS, **os.environ, **overrides}
