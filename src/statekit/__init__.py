"""statekit: Flink-style keyed and operator state for PySpark, with pluggable state backends
(heap, RocksDB, LMDB) and checkpoint storages (driver memory, any fsspec file system).

The user-facing API is re-exported here, imported on first use (PEP 562): ``import statekit``
or ``import statekit.spi`` loads no runtime, storage or pyspark module. Contracts for plugin
authors live in ``statekit.spi``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from statekit.lazy import lazy_exports

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(["BroadcastContext", "CheckpointedFunction", "FunctionInitializationContext",
                     "FunctionSnapshotContext", "KeyedBroadcastProcessFunction", "KeyedCoProcessFunction",
                     "KeyedBatchFunction", "KeyedContext", "KeyedProcessFunction", "KeyedVectorFunction"], "statekit.runtime.function"),
    **dict.fromkeys(["AggregateFunction", "AggregatingStateDescriptor", "ListStateDescriptor", "MapStateDescriptor",
                     "ReducingStateDescriptor", "StateTtlConfig", "TtlTimeCharacteristic", "ValueStateDescriptor"],
                    "statekit.spi.descriptors"),
    "StatekitError": "statekit.spi.errors",
}

__all__ = sorted([*_EXPORTS, "__version__"])

if TYPE_CHECKING:
    from statekit.runtime.function import (
        BroadcastContext, CheckpointedFunction, FunctionInitializationContext, FunctionSnapshotContext,
        KeyedBatchFunction, KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedContext,
        KeyedProcessFunction, KeyedVectorFunction,
    )
    from statekit.spi.descriptors import (
        AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
        ReducingStateDescriptor, StateTtlConfig, TtlTimeCharacteristic, ValueStateDescriptor,
    )
    from statekit.spi.errors import StatekitError


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
