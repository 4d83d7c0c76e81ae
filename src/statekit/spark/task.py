"""Executor side: one subtask of one epoch, called by ``applyInArrow`` with that subtask's rows.

Everything the task needs travels in a picklable ``SubtaskSpec``; native state (RocksDB, LMDB) is
opened inside the Python worker, never before a fork. The subtask's snapshot handles go back to
the driver through an accumulator as JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pyarrow as pa

from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.runtime.function import KeyedProcessFunction
from statekit.runtime.task import KeyedTask, TaskRestore
from statekit.spi.backend import SnapshotOptions, StateBackend, SubtaskInfo
from statekit.spi.storage import CheckpointStorage

KEY_GROUP_COLUMN = "__statekit_kg"
SUBTASK_COLUMN = "__statekit_subtask"
MARKER_COLUMN = "__statekit_marker"  # one row per subtask, so every subtask runs every epoch
OUTPUT_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class SubtaskSpec:
    function: KeyedProcessFunction
    state_backend: StateBackend
    storage: CheckpointStorage
    job_id: str
    operator_id: str
    checkpoint_id: int
    parallelism: int
    max_parallelism: int
    key_columns: tuple[str, ...]
    output_schema: pa.Schema
    incremental: bool
    #: the metadata to restore from (None: fresh state), and where its files are
    restore_metadata: bytes | None
    restore_url: str | None  # an external checkpoint or savepoint; None: this job's own storage
    local_dir: str | None


def run_subtask(spec: SubtaskSpec, subtask_index: int, batches: Iterator[pa.RecordBatch],
                acknowledge: Any) -> Iterator[pa.RecordBatch]:
    subtask = SubtaskInfo(spec.job_id, spec.operator_id, subtask_index, spec.parallelism, spec.max_parallelism)
    access = spec.storage.create_access(spec.job_id)
    restore = None
    if spec.restore_metadata is not None:
        metadata = CheckpointMetadata.from_bytes(spec.restore_metadata)
        if spec.restore_url is not None:
            from statekit.storage.filesystem import resolve
            streams = resolve(spec.restore_url).streams
        else:
            streams = access.restore_streams()
        assigned = assign(metadata.operator(spec.operator_id), subtask_index, spec.parallelism)
        restore = TaskRestore(metadata.checkpoint_id, assigned.keyed, assigned.operator, streams,
                              share_files=spec.restore_url is None)
    task = KeyedTask(spec.function, spec.state_backend, subtask, spec.checkpoint_id, restore=restore,
                     local_dir=spec.local_dir)
    outputs: list[Any] = []
    try:
        task.open()
        for batch in batches:
            task.process_all(_records(batch, spec.key_columns), outputs)
            while len(outputs) >= OUTPUT_BATCH_ROWS:
                yield _to_batch(outputs[:OUTPUT_BATCH_ROWS], spec.output_schema)
                del outputs[:OUTPUT_BATCH_ROWS]
        pending = task.snapshot(SnapshotOptions(incremental=spec.incremental))
        state = pending.write(access.streams(spec.checkpoint_id, subtask.name))
    finally:
        task.close()
    acknowledge.add([(subtask_index, json.dumps(state.to_json()))])
    if outputs:
        yield _to_batch(outputs, spec.output_schema)


def _records(batch: pa.RecordBatch, key_columns: Sequence[str]) -> Iterator[tuple[Any, int, dict[str, Any]]]:
    rows = batch.to_pylist()
    single = key_columns[0] if len(key_columns) == 1 else None
    for row in rows:
        if row.pop(MARKER_COLUMN):
            continue
        key_group = row.pop(KEY_GROUP_COLUMN)
        del row[SUBTASK_COLUMN]
        key = row[single] if single is not None else tuple(row[c] for c in key_columns)
        yield key, key_group, row


def _to_batch(rows: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    names = schema.names
    dicts = [r if isinstance(r, dict) else dict(zip(names, r)) for r in rows]
    return pa.RecordBatch.from_pylist(dicts, schema=schema)
