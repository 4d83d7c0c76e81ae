"""Shared fixtures for statekit's own tests.

The SparkSession is the conformance suite's (``statekit_spark``, from statekit's pytest plugin):
session-scoped and lazy, Spark starts only when a test asks for it.
"""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark(statekit_spark):
    """A real local SparkSession (``local[2,3]``: 2 cores, a task may be retried), shared by the session."""
    return statekit_spark


@pytest.fixture
def statekit_settings(spark):
    """Set ``spark.statekit.<name>`` settings for one test: ``statekit_settings(backend="rocksdb")``
    or with a dict of dotted names; all are restored afterwards."""
    from statekit.conformance_tests.spark_session import statekit_conf

    with statekit_conf(spark) as apply:
        yield apply


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on 127.0.0.1 that allows prepared transactions (``postgres_server``)."""
    from postgres_server import running_postgres

    with running_postgres() as server:
        yield server
