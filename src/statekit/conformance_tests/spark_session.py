"""A real local SparkSession for the Spark level, and ``spark.statekit.*`` settings scoped to a test."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable, Iterator, Mapping

#: two cores, and up to three attempts per task: failure-injection tests need Spark to retry
DEFAULT_MASTER = "local[2,3]"
PREFIX = "spark.statekit."


def local_spark_session(master: str = DEFAULT_MASTER, connect: bool = False) -> Any:
    """Start (or get) a SparkSession on 127.0.0.1 whose Python workers run this interpreter;
    ``connect``: a Spark Connect session on a local Connect server (``builder.remote(master)``),
    which this process starts and which holds the session's Spark (a process holds Connect or
    classic sessions, not both)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors must import this environment's packages
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(master) if connect else SparkSession.builder.master(master)
    return (builder
            .appName("statekit-conformance")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .getOrCreate())


@contextlib.contextmanager
def statekit_conf(spark: Any) -> Iterator[Callable[..., None]]:
    """Yield ``apply(settings=None, **named)``, which sets ``spark.statekit.<name>`` for each
    setting (dotted names in the mapping); every setting gets its previous value back afterwards."""
    previous: dict[str, str | None] = {}

    def apply(settings: Mapping[str, Any] | None = None, **named: Any) -> None:
        for name, value in {**(settings or {}), **named}.items():
            key = PREFIX + name
            if key not in previous:
                previous[key] = spark.conf.get(key, None)
            spark.conf.set(key, str(value))

    try:
        yield apply
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
