"""Savepoints: the canonical, self-contained form of a job's state.

``snapshot_as_savepoint`` restores every subtask of every operator from a completed checkpoint
(full or incremental, any backend) with a ``StateBackend`` able to read it, and snapshots it
again as a savepoint. No user function runs: states are carried forward as restored, each
subtask's operator state exactly as that subtask held it in the checkpoint (union list state
is not redistributed, or restoring the savepoint would multiply its elements). The output the
checkpoint records for a sink comes along (write-ahead logs copied), so that a job restoring the
savepoint commits it if its own job did not.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.snapshot_format import FORMAT_PROPERTY
from statekit.progress import progress
from statekit.runtime.event_time import WATERMARK
from statekit.runtime.function import KeyedContext, KeyedProcessFunction
from statekit.runtime.sink_coordinator import SINK_PROPERTY
from statekit.runtime.sink_writer import with_logs_copied
from statekit.runtime.task import PROCESSING_TIME, KeyedTask, TaskRestore, wall_clock_ms
from statekit.spi.backend import SnapshotOptions, SnapshotType, StateBackend, SubtaskInfo
from statekit.spi.storage import CheckpointStreams, CompletedCheckpointPointer, SavepointTarget
from statekit.spi.timers import MIN_TIMESTAMP

SAVEPOINT = SnapshotOptions(SnapshotType.SAVEPOINT)


class RestoreOnly(KeyedProcessFunction):
    """The task of a savepoint conversion or rewrite only restores and snapshots; it processes no row."""

    def process(self, row: Any, ctx: KeyedContext) -> Iterable[Any] | None:
        raise AssertionError("a savepoint conversion processes no rows")


def snapshot_as_savepoint(source: CheckpointMetadata, source_streams: CheckpointStreams,
                          state_backend: StateBackend, streams_for: Callable[[str], CheckpointStreams],
                          savepoint_id: int | None = None, local_dir: str | None = None) -> CheckpointMetadata:
    """The savepoint metadata of ``source``; its files are written through ``streams_for(subtask)``."""
    operators = {}
    total = sum(s.state_size for operator in source.operators.values() for s in operator.subtasks)
    with progress(f"savepoint of checkpoint {source.checkpoint_id}", total) as advance:
        for operator_id, operator in source.operators.items():
            subtasks = []
            for index in range(operator.parallelism):
                subtasks.append(convert_subtask(source, operator, index, operator.parallelism, source_streams,
                                                state_backend, streams_for, local_dir))
                advance(operator.subtasks[index].state_size)
            operators[operator_id] = OperatorState(operator_id, operator.parallelism, operator.max_parallelism,
                                                   tuple(subtasks))
    properties = {**source.properties, "incremental": False, "source_checkpoint": source.checkpoint_id}
    properties.pop(FORMAT_PROPERTY, None)  # a savepoint is canonical
    if isinstance(source.properties.get(SINK_PROPERTY), dict):  # output its job may not have committed yet
        properties[SINK_PROPERTY] = with_logs_copied(source.properties[SINK_PROPERTY], source_streams,
                                                     streams_for(SINK_PROPERTY))
    return CheckpointMetadata(savepoint_id if savepoint_id is not None else source.checkpoint_id, source.job_id,
                              operators, is_savepoint=True, properties=properties)


def write_savepoint(location: SavepointTarget, source: CheckpointMetadata, source_streams: CheckpointStreams,
                    state_backend: StateBackend, local_dir: str | None = None
                    ) -> tuple[CheckpointMetadata, CompletedCheckpointPointer]:
    """Write a savepoint of ``source`` at ``location`` and commit it; on any failure, discard
    what it wrote (``SavepointTarget.discard``) before the error propagates."""
    try:
        metadata = snapshot_as_savepoint(source, source_streams, state_backend, lambda subtask: location.streams,
                                         local_dir=local_dir)
        return metadata, location.commit(metadata.checkpoint_id, metadata.to_bytes())
    except BaseException:
        location.discard()
        raise


def convert_subtask(source: CheckpointMetadata, operator: OperatorState, index: int, parallelism: int,
                    source_streams: CheckpointStreams, state_backend: StateBackend,
                    streams_for: Callable[[str], CheckpointStreams], local_dir: str | None) -> SubtaskState:
    """Subtask ``index`` of ``operator`` at ``parallelism`` (its key groups; at the checkpoint's own
    parallelism, its operator state too), restored into ``state_backend`` and snapshotted in the
    canonical format."""
    subtask = SubtaskInfo(source.job_id, operator.operator_id, index, parallelism, operator.max_parallelism)
    keyed = assign(operator, index, parallelism).keyed
    # only this subtask's own operator state: the others' count as empty, so nothing is redistributed
    own_operator_state = tuple(s.operator if i == index and parallelism == operator.parallelism else None
                               for i, s in enumerate(operator.subtasks))
    restore = TaskRestore(source.checkpoint_id, keyed, own_operator_state, source_streams, share_files=False)
    # KeyedTask.create disposes the keyed backend if the operator backend cannot be created
    task = KeyedTask.create(RestoreOnly(), state_backend, subtask, source.checkpoint_id,
                            restore=restore, local_dir=local_dir)
    # TTL: entries expired at the checkpoint's own processing time (event-time TTL: its own
    # watermark) are left out, no others
    recorded, watermark = source.properties.get(PROCESSING_TIME), source.properties.get(WATERMARK)
    task.begin_epoch(recorded if isinstance(recorded, int) else wall_clock_ms(), ttl_sweep_seconds=0.0,
                     watermark_ms=watermark if isinstance(watermark, int) else MIN_TIMESTAMP)
    try:
        return task.snapshot(SAVEPOINT, measure=False).write(streams_for(subtask.name))  # no epoch: no metrics
    finally:
        task.close()
