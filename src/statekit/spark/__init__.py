"""Running statekit under Spark: the only package that imports pyspark."""
from statekit.spark.checkpoints import latest_checkpoint
from statekit.spark.conf import StatekitConf
from statekit.spark.keyed import KeyedJob, process_keyed
from statekit.spark.savepoints import savepoint
from statekit.spark.streaming import process_keyed_stream

__all__ = ["KeyedJob", "StatekitConf", "latest_checkpoint", "process_keyed", "process_keyed_stream", "savepoint"]
