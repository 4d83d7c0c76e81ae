"""Engine-independent task runtime: the function API, the task lifecycle and a local runner."""
from statekit.runtime.function import (
    CheckpointedFunction, FunctionInitializationContext, FunctionSnapshotContext, KeyedBatchFunction, KeyedContext,
    KeyedProcessFunction, ProcessFunction,
)
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.task import KeyedTask, TaskRestore

__all__ = ["CheckpointedFunction", "FunctionInitializationContext", "FunctionSnapshotContext",
           "KeyedBatchFunction", "KeyedContext", "KeyedProcessFunction", "ProcessFunction", "KeyedTask", "LocalRunner", "TaskRestore"]
