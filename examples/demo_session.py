"""What the streaming demos share: a quiet local Spark session (no UI, no console progress bars,
errors only in the log, on this machine's loopback address), a work directory, statekit's settings."""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from types import ModuleType
from typing import Any, Iterator


@contextlib.contextmanager
def demo_run(app_name: str, module: ModuleType, **settings: str) -> Iterator[tuple[Any, str]]:
    """(a SparkSession, a work directory) for one demo, both gone afterwards. The session runs on
    ``local[2]`` (or ``STATEKIT_DEMO_MASTER``), its Python workers on this Python, with statekit on
    RocksDB at parallelism 3, checkpoints in the work directory, and ``settings``; ``module`` (the
    demo's pipelines) goes to the executors by value."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    cloudpickle.register_pickle_by_value(module)  # executors need not import the example modules
    work = tempfile.mkdtemp(prefix=f"{app_name}-")
    spark = (SparkSession.builder.master(os.environ.get("STATEKIT_DEMO_MASTER", "local[2]"))
             .appName(app_name).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for name, value in {"backend": "rocksdb", "checkpoint.storage": "filesystem", "parallelism": "3",
                            "checkpoint.dir": f"file://{work}/checkpoints", **settings}.items():
            spark.conf.set(f"spark.statekit.{name}", value)
        yield spark, work
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
