"""Shared fixtures for statekit's own tests.

The ``spark`` fixture is session-scoped and lazy: Spark starts only when a test asks for it.
"""
from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession (``local[2,3]``: 2 cores, a task may be retried), shared by the session."""
    # Executors must run this interpreter (the virtual environment's), or imports fail in tasks.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")  # 3 attempts per task: failure tests need retries
        .appName("statekit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture
def statekit_settings(spark):
    """Set ``spark.statekit.<name>`` settings for one test: ``statekit_settings(backend="rocksdb")``
    or with a dict of dotted names; all are unset afterwards."""
    keys = []

    def apply(settings=None, **named):
        for name, value in {**(settings or {}), **named}.items():
            key = "spark.statekit." + name
            spark.conf.set(key, str(value))
            keys.append(key)

    yield apply
    for key in keys:
        spark.conf.unset(key)
