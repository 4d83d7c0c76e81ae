"""Running statekit under Spark: the only package that imports pyspark."""
from statekit.spark.conf import StatekitConf
from statekit.spark.keyed import process_keyed

__all__ = ["StatekitConf", "process_keyed"]
