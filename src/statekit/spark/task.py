"""Executor side: one subtask of one epoch, called by ``mapInArrow`` on its own partition's rows:
restore, process the rows (late ones dropped or set aside when the job has event time), fire due timers,
snapshot, and stream the output back while the snapshot uploads.

Everything the task needs travels in a picklable ``SubtaskSpec``; native state (RocksDB, LMDB) is
opened inside the Python worker, never before a fork. The subtask's snapshot handles go back to
the driver as data: ``acknowledge`` gets them, as JSON, and the stage returns them as a row.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.pandas.types import from_arrow_type

from statekit.backends.common.local_dirs import default_local_dir
from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata, SubtaskState
from statekit.runtime.function import Calls, ProcessFunction, calls_of
from statekit.runtime.grouped_rows import GroupedRows
from statekit.runtime.local_recovery import DEFAULT_RETENTION_SECONDS, SlotLease, lease_slot
from statekit.runtime.metrics import TaskMetrics, elapsed_ms
from statekit.runtime.savepoints import SAVEPOINT
from statekit.runtime.sink_writer import SubtaskSinkWriter
from statekit.runtime.snapshot_upload import SnapshotUpload
from statekit.runtime.task import (
    DEFAULT_TTL_SWEEP_SECONDS, KeyedTask, TaskRestore, short_repr, wall_clock_ms,
)
from statekit.spark.conf import DEFAULT_BATCH_MAX_BYTES
from statekit.spark.event_time import EventTimeTracker, SubtaskEventTime
from statekit.spark.inputs import INPUT_COLUMN, read_broadcast_rows
from statekit.spi.errors import FunctionResultError, StatekitError
from statekit.spi.key_groups import key_groups_of_types
from statekit.spi.backend import SnapshotFormat, SnapshotOptions, StateBackend, SubtaskInfo
from statekit.spi.handles import cryptographic_checksums
from statekit.spi.sinks import DISCARDING_KIND, Sink, SinkContext
from statekit.spi.serializer import TypeSerializer, trusting
from statekit.spi.storage import CheckpointStorage, SavepointTarget
from statekit.spi.timers import MIN_TIMESTAMP

#: each row's key group; ``-(i + 1)`` on subtask i's marker row (null key and values), which makes
#: every subtask run every epoch, with rows or without
KEY_GROUP_COLUMN = "__statekit_kg"


def rows_mask(batch: pa.RecordBatch) -> pa.Array:
    """True on the batch's rows, false on its marker row."""
    return pc.greater_equal(batch.column(KEY_GROUP_COLUMN), 0)
OUTPUT_BATCH_ROWS = 10_000
#: how a subtask got its state at the start of an epoch (recorded in the checkpoint's properties)
RECOVERY_FRESH = "fresh"  # no restore point
RECOVERY_PARKED = "parked"  # backends this worker kept open since the previous epoch
RECOVERY_LOCAL = "local"  # working state reopened from executor-local disk
RECOVERY_STORAGE = "storage"  # restored from checkpoint storage


@dataclass(frozen=True)
class SubtaskSpec:
    function: ProcessFunction
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
    #: the input is grouped by key in batches of up to this many bytes
    batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES
    #: the epoch's processing time (epoch ms; the same on replay) and the TTL sweep budget
    processing_time_ms: int | None = None  # None: the wall clock when the task starts
    ttl_sweep_seconds: float = DEFAULT_TTL_SWEEP_SECONDS
    #: the event-time column, the epoch's watermark and the late-row policy (None: no event time)
    event_time: SubtaskEventTime | None = None
    #: write the epoch's state as this savepoint's files instead of a checkpoint (a bootstrap)
    savepoint: SavepointTarget | None = None
    #: where the output goes instead of back to Spark, and the token of the run (``spi.sinks``)
    sink: Sink | None = None
    sink_run: str = "0"
    #: the format of a full checkpoint (``spark.statekit.checkpoint.format``)
    checkpoint_format: SnapshotFormat = SnapshotFormat.CANONICAL
    #: how long working state unused on an executor stays there (``spark.statekit.local.retention``)
    local_retention_seconds: float = DEFAULT_RETENTION_SECONDS
    #: the key columns' Spark types: a restore checks that each key is in the key group its index
    #: entry claims (``spi.key_groups.key_groups_of_types``); empty: not checked
    key_types: tuple[str, ...] = ()
    #: where the job's checkpoints are (``runtime.local_recovery.job_scope``): names its slots of working state
    local_scope: str = ""
    #: what writes the keys, the same for every subtask (``runtime.task.job_key_serializer``)
    key_serializer: TypeSerializer | None = None
    #: restore state that runs code when read (``spark.statekit.restore.trust-pickle``, or signed)
    trust_pickle: bool = False
    #: the job signs its checkpoints: files get SHA-256 checksums, and those read must have them
    #: (``checkpoint.signing``; the driver verified the restore point's signature)
    signed: bool = False
    #: the epoch's rows are the last of the input: every event-time timer fires after them
    end_of_input: bool = False
    #: the schema of the function's input rows, where late rows are the job's side output (None: they are not)
    late_schema: pa.Schema | None = None
    #: a connected job of two inputs: each input's struct column (``spark.inputs``); empty: one input
    input_structs: tuple[str, ...] = ()
    #: a broadcast job: the epoch's broadcast rows, processed by every subtask first (Arrow IPC; None: none)
    broadcast_rows: bytes | None = None
    #: acknowledge the subtask's metrics (``spark.statekit.metrics.enabled``)
    metrics: bool = True


class LateRowsOutput:
    """A subtask's side output of late rows, as batches of the input rows' schema: those late by
    their timestamp (found by the ``EventTimeTracker``) and those the function reported late."""

    def __init__(self, schema: pa.Schema, deliver: Callable[[pa.RecordBatch], None]) -> None:
        self.schema, self._deliver = schema, deliver

    def add_batch(self, batch: pa.RecordBatch) -> None:
        """Late rows of a batch of the stage's input (with the engine's key-group column), whose
        timestamps Spark gives in the session's time zone: cast to the schema's (UTC), the same instants."""
        self._deliver(pa.RecordBatch.from_arrays([batch.column(field.name).cast(field.type) for field in self.schema],
                                                 schema=self.schema))

    def add_reported(self, rows: list[Any]) -> None:
        """Rows the function reported (``KeyedContext.report_late``), taken out of ``rows``."""
        if not rows:
            return
        try:
            batch = pa.RecordBatch.from_pylist(rows, schema=self.schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise FunctionResultError(f"a late row the function reported, {short_repr(rows[0])}, is not a row of its "
                                      f"input ({self.schema.names}): report the row as the function got it ({exc})") \
                from exc
        rows.clear()
        self._deliver(batch)


def run_subtask(spec: SubtaskSpec, subtask_index: int, batches: Iterator[pa.RecordBatch],
                acknowledge: Callable[[tuple], None],
                set_aside: Callable[[pa.RecordBatch], None] | None = None) -> Iterator[pa.RecordBatch]:
    """One subtask's epoch on an executor: its output batches, then its acknowledgement;
    ``set_aside`` gets the late rows where the job has a side output of them (``late_schema``)."""
    with cryptographic_checksums(spec.signed):
        yield from _run_subtask(spec, subtask_index, batches, acknowledge, set_aside)


def _run_subtask(spec: SubtaskSpec, subtask_index: int, batches: Iterator[pa.RecordBatch],
                 acknowledge: Callable[[tuple], None],
                 set_aside: Callable[[pa.RecordBatch], None] | None) -> Iterator[pa.RecordBatch]:
    subtask = SubtaskInfo(spec.job_id, spec.operator_id, subtask_index, spec.parallelism, spec.max_parallelism)
    access = spec.storage.create_access(spec.job_id)
    restore, own_state = _restore_of(spec, subtask_index, access)
    lease = lease_slot(spec.local_dir or default_local_dir(), spec.state_backend.name, subtask, own_state,
                       spec.local_retention_seconds, spec.local_scope)
    try:
        task, recovery = _open_task(spec, subtask, restore, lease)
    except BaseException:
        lease.release()
        raise
    metrics = task.metrics
    metrics.restore_source = recovery
    outputs: list[Any] = []
    writer: SubtaskSinkWriter | None = None
    late = LateRowsOutput(spec.late_schema, set_aside) if spec.late_schema is not None and set_aside else None
    tracker = (EventTimeTracker(spec.event_time, rows_mask, late.add_batch if late is not None else None)
               if spec.event_time is not None else None)
    if tracker is not None:
        batches = tracker.filtered(batches)
    try:
        task.begin_epoch(spec.processing_time_ms if spec.processing_time_ms is not None else wall_clock_ms(),
                         spec.ttl_sweep_seconds,
                         spec.event_time.watermark_ms if spec.event_time is not None else MIN_TIMESTAMP,
                         spec.event_time.type_name if spec.event_time is not None else None,
                         spec.event_time.element_times() if spec.event_time is not None else None)
        if late is not None:
            task.context.late_output = []
        task.open()
        if spec.broadcast_rows is not None:
            task.process_broadcast(read_broadcast_rows(spec.broadcast_rows), outputs)
        if spec.sink is not None:
            writer = SubtaskSinkWriter(spec.sink, _sink_context(spec, subtask_index),
                                       access.streams(spec.checkpoint_id, subtask.name), spec.output_schema)
        calls = calls_of(spec.function)
        checked = False  # the subtask's first output rows, against the output schema
        for batch in _coalesced(batches, spec.batch_max_bytes):
            grouped = _grouped(batch, spec.key_columns)
            metrics.count_input(grouped.num_rows, grouped.num_keys)
            if calls is Calls.ROWS:
                task.process_row_runs(grouped.row_runs(), outputs)
            elif calls is Calls.SIDE_ROWS:
                task.process_side_row_runs(grouped.side_row_runs(INPUT_COLUMN, spec.input_structs), outputs)
            elif calls is Calls.KEY_RUNS:
                task.process_key_runs(grouped.key_runs(), outputs)
            else:
                produced = task.process_grouped(grouped)
                if isinstance(produced, pa.Table):
                    yield from _emit_columns(produced, spec.output_schema, writer, metrics)
                elif produced:
                    outputs.extend(produced)
            if not checked and outputs:
                checked = check_first_rows(outputs, spec.output_schema, spec.function)
            if late is not None:
                late.add_reported(task.context.late_output)
            while len(outputs) >= OUTPUT_BATCH_ROWS:
                yield from _emit(outputs[:OUTPUT_BATCH_ROWS], spec.output_schema, writer, metrics)
                del outputs[:OUTPUT_BATCH_ROWS]
        if spec.end_of_input:
            task.end_input()
        task.fire_timers(outputs)
        if not checked and outputs:  # before the snapshot: the first output came from timers
            check_first_rows(outputs, spec.output_schema, spec.function)
        if spec.savepoint is not None:
            pending, streams = task.snapshot(SAVEPOINT, spec.metrics), spec.savepoint.streams
        else:
            pending = task.snapshot(SnapshotOptions(incremental=spec.incremental, format=spec.checkpoint_format),
                                    spec.metrics)
            streams = access.streams(spec.checkpoint_id, subtask.name)
        # a thread only where work is left to overlap with the upload (output, a sink's pre-commit):
        # starting one costs milliseconds on a busy executor, more than it saves when there is none
        upload = SnapshotUpload(pending, streams, concurrent=spec.state_backend.capabilities.async_snapshots and (
            bool(outputs) or writer is not None and writer.sink.kind != DISCARDING_KIND))
        try:
            while outputs:  # the rest of the output goes to Spark (or the sink) while the snapshot uploads
                yield from _emit(outputs[:OUTPUT_BATCH_ROWS], spec.output_schema, writer, metrics)
                del outputs[:OUTPUT_BATCH_ROWS]
            sink_entry = None
            if writer is not None:
                started = time.perf_counter()
                sink_entry = writer.finish()
                metrics.sink_pre_commit_ms = elapsed_ms(started)
            state = upload.result()
        except BaseException:
            upload.abandon()
            raise
    except BaseException:
        if writer is not None:
            writer.abort()
        try:
            task.close()
        finally:
            lease.release()
        raise
    try:
        # a savepoint is restored from storage, never from this worker's state: no backends kept
        task.close(keep_backends=spec.savepoint is None)  # if the function's close fails, they are disposed
    except BaseException:
        lease.release()
        raise
    if spec.savepoint is None:
        lease.publish(spec.checkpoint_id, state, task.keyed_backend, task.operator_backend,
                      on_disk=spec.state_backend.capabilities.local_recovery)
    else:
        lease.release()
    seen = ((tracker.max_event_times_ms, tracker.late_rows + task.context.late_rows) if tracker is not None
            else ([MIN_TIMESTAMP], 0))
    metrics.late_rows = seen[1]
    acknowledge((subtask_index, json.dumps(state.to_json()), recovery, seen,
                 json.dumps(sink_entry) if sink_entry is not None else None,
                 metrics.to_json() if spec.metrics else None))


def _sink_context(spec: SubtaskSpec, subtask_index: int) -> SinkContext:
    """The subtask's transaction identity. Its attempt is Spark's task attempt id, unique in the
    application: a task's attempt number starts again at 0 when Spark retries the stage, so a
    zombie attempt of the first stage attempt would share (and abort) the retried one's transaction."""
    context = TaskContext.get()
    return SinkContext(spec.job_id, spec.operator_id, spec.checkpoint_id, subtask_index, spec.sink_run,
                       context.taskAttemptId() if context is not None else 0)


def _emit(rows: list[Any], schema: pa.Schema, writer: SubtaskSinkWriter | None,
          metrics: TaskMetrics) -> Iterator[pa.RecordBatch]:
    """Output rows as a batch to Spark, or into the sink."""
    yield from _deliver(_to_batch(rows, schema), writer, metrics)


def _deliver(batch: pa.RecordBatch, writer: SubtaskSinkWriter | None,
             metrics: TaskMetrics) -> Iterator[pa.RecordBatch]:
    metrics.rows_out += batch.num_rows
    if writer is None:
        yield batch
    else:
        writer.write(batch)


def _restore_of(spec: SubtaskSpec, subtask_index: int, access: Any) -> tuple[TaskRestore | None, SubtaskState | None]:
    """What the subtask restores, and its own state in the restore point when local state can
    equal it (the job's own checkpoint at the same parallelism)."""
    if spec.restore_metadata is None:
        return None, None
    metadata = CheckpointMetadata.from_bytes(spec.restore_metadata, spec.restore_url or f"the restore point of job {spec.job_id!r}")
    operator = metadata.operator(spec.operator_id)
    if spec.restore_url is not None:
        streams = spec.storage.resolve_checkpoint(spec.restore_url).streams
    else:
        streams = access.restore_streams()
    assigned = assign(operator, subtask_index, spec.parallelism)
    restore = TaskRestore(metadata.checkpoint_id, assigned.keyed, assigned.operator, streams,
                          share_files=spec.restore_url is None,
                          key_groups_of=key_groups_of_types(spec.key_types, spec.max_parallelism))
    same_layout = (spec.restore_url is None and operator.parallelism == spec.parallelism
                   and operator.max_parallelism == spec.max_parallelism)
    return restore, operator.subtasks[subtask_index] if same_layout else None


def _open_task(spec: SubtaskSpec, subtask: SubtaskInfo, restore: TaskRestore | None,
               lease: SlotLease) -> tuple[KeyedTask, str]:
    """Reuse the backends this worker parked, reopen the working state left on this machine, or
    restore from storage, in that order; also returns which (a ``RECOVERY_*`` name)."""
    parked = lease.parked.keyed if lease.parked is not None and restore is not None else None
    if restore is None:
        recovery = RECOVERY_FRESH
    elif parked is not None:
        parked.notify_checkpoint_complete(restore.checkpoint_id)
        recovery = RECOVERY_PARKED
    else:
        recovery = RECOVERY_LOCAL if lease.reusable else RECOVERY_STORAGE
    on_disk = spec.state_backend.capabilities.local_recovery
    with trusting(spec.trust_pickle):
        task = KeyedTask.create(spec.function, spec.state_backend, subtask, spec.checkpoint_id,
                                key_serializer=spec.key_serializer, restore=restore, local_dir=spec.local_dir,
                                working_dir=lease.working_dir if on_disk else None,
                                resume_local_state=on_disk and lease.reusable, keyed_backend=parked)
    return task, recovery


def _coalesced(batches: Iterator[pa.RecordBatch], max_bytes: int) -> Iterator[pa.RecordBatch]:
    """Spark's Arrow batches joined up to ``max_bytes``: the more rows a batch has, the more rows
    of each key one ``process_rows`` call (or one ``process_groups`` call) gets."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        pending.append(batch)
        size += batch.nbytes
        if size >= max_bytes:
            yield _concatenated(pending)
            pending, size = [], 0
    if pending:
        yield _concatenated(pending)


def _concatenated(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch of ``batches``' rows (``pa.concat_batches`` needs pyarrow 19; this works from 15 on)."""
    if len(batches) == 1:
        return batches[0]
    columns = [pa.concat_arrays([batch.column(i) for batch in batches]) for i in range(batches[0].num_columns)]
    return pa.RecordBatch.from_arrays(columns, schema=batches[0].schema)


def _grouped(batch: pa.RecordBatch, key_columns: Sequence[str]) -> GroupedRows:
    """The batch's rows (markers dropped, without the engine's columns) grouped by key."""
    lowest = pc.min(batch.column(KEY_GROUP_COLUMN)).as_py()
    rows = batch.filter(rows_mask(batch)) if lowest is not None and lowest < 0 else batch  # a marker in it
    columns = [name for name in rows.schema.names if name != KEY_GROUP_COLUMN]
    return GroupedRows.of_sorted(rows.select(columns), key_columns, rows.column(KEY_GROUP_COLUMN))


def _emit_columns(table: pa.Table, schema: pa.Schema, writer: SubtaskSinkWriter | None,
                  metrics: TaskMetrics) -> Iterator[pa.RecordBatch]:
    """Output columns as batches of the output schema, to Spark or into the sink."""
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise StatekitError(f"the function returned columns {table.column_names}; the output schema's columns "
                            f"{missing} are missing (output schema: {schema.names})")
    selected = _check_not_null(table.select(schema.names), schema)
    try:
        table = selected.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise StatekitError(f"the function's output columns ({selected.schema}) do not convert to the output schema "
                            f"({schema}): {exc}") from exc
    for batch in table.to_batches(max_chunksize=OUTPUT_BATCH_ROWS * 10):
        yield from _deliver(batch, writer, metrics)


def _to_batch(rows: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    """Output rows (tuples, or dicts) as a batch of the output schema: in one native pass as a
    struct array (a tenth of the time of column lists); rows it does not take (a None, a list,
    tuples and dicts mixed, a value that does not convert) go by columns, which names the problem."""
    try:
        as_structs = pa.array(rows, type=pa.struct(list(schema)))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        as_structs = None
    if as_structs is not None and not as_structs.null_count:
        return _check_not_null(pa.RecordBatch.from_arrays(as_structs.flatten(), schema=schema), schema)
    return _to_batch_by_columns(rows, schema)


def _to_batch_by_columns(rows: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    names = schema.names
    if all(type(r) is tuple for r in rows):  # the fast path: transpose tuples into columns
        widths = {len(r) for r in rows}
        if widths != {len(schema)}:
            raise FunctionResultError(f"the function returned rows of {sorted(widths)} values; the output schema "
                                      f"has {len(schema)} columns {names}")
        columns = list(zip(*rows))
        try:
            batch = pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)],
                                               schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise _value_error(columns, schema, exc) from exc
        return _check_not_null(batch, schema)
    dicts = [r if type(r) is dict else _as_dict(r, names) for r in rows]
    try:
        batch = pa.RecordBatch.from_pylist(dicts, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _value_error([[d.get(name) for d in dicts] for name in names], schema, exc) from exc
    return _check_not_null(batch, schema)


def check_first_rows(rows: list[Any], schema: pa.Schema, function: Any) -> bool:
    """Check a subtask's first ``CHECKED_ROWS`` output rows value by value against the output
    schema, as soon as the function produced them: a value of the wrong type fails the subtask
    before it processed the rest of its input (the output is converted when it is emitted, after
    up to ``OUTPUT_BATCH_ROWS`` rows, or after the whole input), and a float in an integer column,
    which Arrow would truncate silently, fails too. Returns True (checked)."""
    first = rows[:CHECKED_ROWS]
    batch_error: Exception | None = None
    try:
        _to_batch(first, schema)
    except FunctionResultError as exc:  # the row's shape, a null, or a value that does not convert
        batch_error = exc
    columns = _columns_of(first, schema.names) if batch_error is None or isinstance(batch_error.__cause__, (
        pa.ArrowInvalid, pa.ArrowTypeError)) else None
    for values, field in zip(columns or [], schema):
        for value in values:
            if value is not None and not _fits(value, field.type):
                raise FunctionResultError(
                    f"{type(function).__name__} returned {type(value).__name__} {short_repr(value)} for output column "
                    f"{field.name!r}, which the output schema declares {_spark_type_name(field.type)}: return "
                    f"{_python_types(field.type)} there, or declare the column with the type it returns "
                    f"(checked on each subtask's first {CHECKED_ROWS} output rows)")
    if batch_error is not None:
        raise batch_error
    return True


#: how many of each subtask's first output rows ``check_first_rows`` checks
CHECKED_ROWS = 100


def _columns_of(rows: list[Any], names: list[str]) -> list[list[Any]]:
    """The values of well-formed rows (tuples, lists or dicts of the output schema's columns) by column."""
    columns: list[list[Any]] = [[] for _ in names]
    for row in rows:
        if isinstance(row, dict):
            values = [row.get(name) for name in names]
        elif isinstance(row, (tuple, list)) and len(row) == len(names):
            values = list(row)
        else:
            continue
        for column, value in zip(columns, values):
            column.append(value)
    return columns


def _fits(value: Any, arrow_type: pa.DataType) -> bool:
    """Whether Arrow converts ``value`` into ``arrow_type`` without losing it: a float (even 1.5)
    converts into an integer column, truncated."""
    if pa.types.is_integer(arrow_type) and isinstance(value, (float, np.floating)):
        return False
    try:
        pa.array([value], type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return False
    return True


def _spark_type_name(arrow_type: pa.DataType) -> str:
    try:
        return from_arrow_type(arrow_type).simpleString()
    except Exception:  # noqa: BLE001 - a type Spark has no name for: Arrow's
        return str(arrow_type)


def _python_types(arrow_type: pa.DataType) -> str:
    """What a function returns for a column of ``arrow_type``, in words."""
    if pa.types.is_integer(arrow_type):
        return "an int"
    if pa.types.is_floating(arrow_type):
        return "a float (or an int)"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "a str"
    if pa.types.is_boolean(arrow_type):
        return "a bool"
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "bytes"
    return f"a value of Arrow type {arrow_type}"


def _check_not_null(data: Any, schema: pa.Schema) -> Any:
    """``data`` (a batch or table of ``schema``), checked to hold no null in a NOT NULL column: Spark
    trusts the schema and failed with a NullPointerException in the JVM, after retrying the task."""
    for i, field in enumerate(schema):
        if not field.nullable and data.column(i).null_count:
            raise FunctionResultError(f"the function returned null for output column {field.name!r}, which the output "
                                      f"schema declares NOT NULL: return a value there, or declare the column nullable")
    return data


def _as_dict(row: Any, names: list[str]) -> dict[str, Any]:
    """A row that is not a dict as one: a tuple (or list) of the output schema's values in order."""
    if isinstance(row, dict):
        return row
    if isinstance(row, (tuple, list)):
        if len(row) != len(names):
            raise FunctionResultError(f"the function returned a row of {len(row)} values {short_repr(row)}; the "
                                      f"output schema has {len(names)} columns {names}")
        return dict(zip(names, row))
    raise FunctionResultError(f"the function returned a row {short_repr(row)} ({type(row).__name__}): a row is a tuple "
                              f"of the output schema's values {names} in order, or a dict of column name to value. Its "
                              f"output is an iterable of rows: to return one row, `return [row]` (not `return row`) or "
                              f"`yield row`")


def _value_error(columns: Sequence[Sequence[Any]], schema: pa.Schema, exc: Exception) -> FunctionResultError:
    """The error of a row value that does not convert to its output column's type, naming the column."""
    for values, field in zip(columns, schema):
        try:
            pa.array(values, type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as column_exc:
            return FunctionResultError(f"the function's output column {field.name!r} ({field.type}) got a value "
                                       f"that does not convert: {column_exc}")
    return FunctionResultError(f"the function's output rows do not convert to the output schema ({schema}): {exc}")

