"""Engine-independent task runtime: the function API, the task lifecycle and a local runner.
Names are imported on first use, so that importing the function API does not load storages."""
from __future__ import annotations

from typing import TYPE_CHECKING

from statekit.lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["BroadcastContext", "CheckpointedFunction", "FunctionInitializationContext",
                     "FunctionSnapshotContext", "KeyedBroadcastProcessFunction", "KeyedCoProcessFunction",
                     "KeyedBatchFunction", "KeyedContext", "KeyedProcessFunction", "KeyedVectorFunction", "ProcessFunction"],
                    "statekit.runtime.function"),
    "GroupedRows": "statekit.runtime.grouped_rows",
    "LocalRunner": "statekit.runtime.local_runner",
    "KeyedTask": "statekit.runtime.task",
    "TaskRestore": "statekit.runtime.task",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from statekit.runtime.function import (
        BroadcastContext, CheckpointedFunction, FunctionInitializationContext, FunctionSnapshotContext,
        KeyedBatchFunction, KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedContext,
        KeyedProcessFunction, KeyedVectorFunction, ProcessFunction,
    )
    from statekit.runtime.grouped_rows import GroupedRows
    from statekit.runtime.local_runner import LocalRunner
    from statekit.runtime.task import KeyedTask, TaskRestore


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
