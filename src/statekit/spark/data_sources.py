"""Registering statekit's data sources, ``statekit`` and ``statekit-metadata``, with a session."""
from __future__ import annotations

from pyspark.sql import SparkSession

from statekit.spark.metadata_source import StatekitMetadataSource
from statekit.spark.state_source import StatekitStateSource
from statekit.spi.errors import ConfigurationError

#: the statekit source pushes key filters down, which PySpark runs only with this setting on
PUSHDOWN_SETTING = "spark.sql.python.filterPushdown.enabled"


def register_data_sources(spark: SparkSession | None = None) -> None:
    """Make ``spark.read.format("statekit")`` and ``format("statekit-metadata")`` available in
    ``spark`` (default: the active session), and turn on filter pushdown for Python data sources.
    ``import statekit.spark`` does it for the active session, and each statekit job for its own."""
    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise ConfigurationError("no active SparkSession to register statekit's data sources with: create the "
                                 "session first, then call statekit.spark.register_data_sources(spark)")
    if getattr(session, "_statekit_data_sources", False):
        return
    session.conf.set(PUSHDOWN_SETTING, "true")
    session.dataSource.register(StatekitStateSource)
    session.dataSource.register(StatekitMetadataSource)
    session._statekit_data_sources = True  # type: ignore[attr-defined]
