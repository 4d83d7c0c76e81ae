"""statekit: Flink-style keyed and operator state for PySpark, with pluggable state backends
(heap, RocksDB, LMDB) and checkpoint storages (driver memory, any fsspec file system).

The user-facing API is re-exported here; contracts for plugin authors live in ``statekit.spi``.
Importing statekit does not import pyspark.
"""
from statekit.runtime.function import (
    CheckpointedFunction, FunctionInitializationContext, FunctionSnapshotContext, KeyedBatchFunction, KeyedContext,
    KeyedProcessFunction,
)
from statekit.spi.descriptors import (
    AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, StateTtlConfig, ValueStateDescriptor,
)
from statekit.spi.errors import StatekitError

__version__ = "0.1.0"

__all__ = ["AggregateFunction", "AggregatingStateDescriptor", "CheckpointedFunction",
           "FunctionInitializationContext", "FunctionSnapshotContext", "KeyedBatchFunction", "KeyedContext", "KeyedProcessFunction",
           "ListStateDescriptor", "MapStateDescriptor", "ReducingStateDescriptor", "StateTtlConfig",
           "StatekitError", "ValueStateDescriptor", "__version__"]
