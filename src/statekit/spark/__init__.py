"""Running statekit under Spark: the only package that imports pyspark.

Importing it registers the ``statekit`` and ``statekit-metadata`` data sources with the active
Spark session, if there is one (``register_data_sources`` does it for any session).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from statekit.lazy import lazy_exports

_EXPORTS = {
    "latest_checkpoint": "statekit.spark.checkpoints",
    "register_data_sources": "statekit.spark.data_sources",
    "StatekitConf": "statekit.spark.conf",
    "KeyedJob": "statekit.spark.keyed",
    "KeyedOutput": "statekit.spark.keyed",
    "process_keyed": "statekit.spark.keyed",
    "savepoint": "statekit.spark.savepoints",
    "rewrite_savepoint": "statekit.spark.rewrite",
    "process_keyed_stream": "statekit.spark.streaming",
    **dict.fromkeys(["process_broadcast", "process_broadcast_stream", "process_connected", "process_connected_stream"],
                    "statekit.spark.two_inputs"),
    "write_savepoint": "statekit.spark.bootstrap",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from statekit.spark.bootstrap import write_savepoint
    from statekit.spark.checkpoints import latest_checkpoint
    from statekit.spark.conf import StatekitConf
    from statekit.spark.data_sources import register_data_sources
    from statekit.spark.keyed import KeyedJob, KeyedOutput, process_keyed
    from statekit.spark.rewrite import rewrite_savepoint
    from statekit.spark.savepoints import savepoint
    from statekit.spark.streaming import process_keyed_stream
    from statekit.spark.two_inputs import (
        process_broadcast, process_broadcast_stream, process_connected, process_connected_stream,
    )

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


def _register_with_active_session() -> None:
    if "pyspark.sql" not in sys.modules:
        return  # no session can be active; importing pyspark here would only slow the import
    from pyspark.sql import SparkSession

    if SparkSession.getActiveSession() is not None:
        from statekit.spark import data_sources

        data_sources.register_data_sources()


_register_with_active_session()
