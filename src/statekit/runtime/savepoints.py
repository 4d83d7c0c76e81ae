"""Savepoints: the canonical, self-contained form of a job's state.

``write_savepoint`` restores every subtask of every operator from a completed checkpoint (full
or incremental, any backend) with a ``StateBackend`` able to read it, and snapshots it again as
a savepoint. No user function is needed: states are carried forward as restored.
"""
from __future__ import annotations

from typing import Callable

from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.serializers import resolve
from statekit.spi.backend import (
    KeyedBackendParams, OperatorBackendParams, SnapshotOptions, SnapshotType, StateBackend, SubtaskInfo,
)
from statekit.spi.serializer import SerializerSnapshot
from statekit.spi.storage import CheckpointStreams

SAVEPOINT = SnapshotOptions(SnapshotType.SAVEPOINT)


def snapshot_as_savepoint(source: CheckpointMetadata, source_streams: CheckpointStreams,
                          state_backend: StateBackend, streams_for: Callable[[str], CheckpointStreams],
                          savepoint_id: int | None = None, local_dir: str | None = None) -> CheckpointMetadata:
    """The savepoint metadata of ``source``; its files are written through ``streams_for(subtask)``."""
    operators = {}
    for operator_id, operator in source.operators.items():
        subtasks = tuple(_convert_subtask(source, operator, index, source_streams, state_backend, streams_for,
                                          local_dir) for index in range(operator.parallelism))
        operators[operator_id] = OperatorState(operator_id, operator.parallelism, operator.max_parallelism, subtasks)
    properties = {**source.properties, "incremental": False, "source_checkpoint": source.checkpoint_id}
    return CheckpointMetadata(savepoint_id if savepoint_id is not None else source.checkpoint_id, source.job_id,
                              operators, is_savepoint=True, properties=properties)


def _convert_subtask(source: CheckpointMetadata, operator: OperatorState, index: int,
                     source_streams: CheckpointStreams, state_backend: StateBackend,
                     streams_for: Callable[[str], CheckpointStreams], local_dir: str | None) -> SubtaskState:
    subtask = SubtaskInfo(source.job_id, operator.operator_id, index, operator.parallelism, operator.max_parallelism)
    restore = assign(operator, index, operator.parallelism)
    key_serializer = next((SerializerSnapshot.from_json(h.key_serializer).restore_serializer()
                           for h in restore.keyed if hasattr(h, "key_serializer")), None)
    keyed = state_backend.create_keyed_backend(KeyedBackendParams(
        subtask, resolve(key_serializer), restore.keyed, source_streams, source.checkpoint_id, local_dir))
    operator_backend = state_backend.create_operator_backend(
        OperatorBackendParams(subtask, restore.operator, source_streams))
    try:
        streams = streams_for(subtask.name)
        keyed_handle = keyed.snapshot(source.checkpoint_id, SAVEPOINT).write(streams)
        operator_handle = operator_backend.snapshot(source.checkpoint_id).write(streams)
    finally:
        keyed.dispose()
        operator_backend.dispose()
    return SubtaskState((keyed_handle,) if keyed_handle is not None else (), operator_handle)  # type: ignore[arg-type]
