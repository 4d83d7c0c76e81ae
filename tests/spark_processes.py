"""The environment of a short Spark job that a test runs as a process of its own (a driver it
kills, an example script): such a driver lives seconds and runs a few small jobs, so its JVM
compiles with C1 only (``-XX:TieredStopAtLevel=1``), which starts it and runs those jobs faster
than C2 would; the suite's own long-lived SparkSession keeps the JVM's default. A
``PYSPARK_SUBMIT_ARGS`` already in the environment is kept."""
from __future__ import annotations

import os

QUICK_DRIVER = "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell"


def short_job_env(**overrides: str) -> dict[str, str]:
    """``os.environ`` with ``overrides``, and the quick-starting driver JVM unless one is set."""
    return {"PYSPARK_SUBMIT_ARGS": QUICK_DRIVER, **os.environ, **overrides}
