"""Running statekit under Spark: the only package that imports pyspark."""
from __future__ import annotations

from typing import TYPE_CHECKING

from statekit.lazy import lazy_exports

_EXPORTS = {
    "latest_checkpoint": "statekit.spark.checkpoints",
    "StatekitConf": "statekit.spark.conf",
    "KeyedJob": "statekit.spark.keyed",
    "process_keyed": "statekit.spark.keyed",
    "savepoint": "statekit.spark.savepoints",
    "process_keyed_stream": "statekit.spark.streaming",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from statekit.spark.checkpoints import latest_checkpoint
    from statekit.spark.conf import StatekitConf
    from statekit.spark.keyed import KeyedJob, process_keyed
    from statekit.spark.savepoints import savepoint
    from statekit.spark.streaming import process_keyed_stream

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
