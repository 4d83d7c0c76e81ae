"""A pure-Python runner: a keyed function over in-memory records with p subtasks, one
checkpoint per epoch, restore, savepoints and rescaling. It follows the same rules as the Spark
runner (epoch N restores from the latest completed checkpoint with id < N) and is what the
in-process tests and the conformance suite use.
"""
from __future__ import annotations

import copy
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import pyarrow as pa

from statekit.checkpoint.assignment import assign, check_max_parallelism
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.ownership import BOUNDED, JobOwnership
from statekit.checkpoint.signing import signing
from statekit.checkpoint.store import FRESH_START, RESTORE_POINT, CheckpointStore, CompletedCheckpoint, RestoreMode
from statekit.reading.snapshot_reader import KEY_SCHEMA
from statekit.runtime.event_time import (
    EVENT_TIME_TYPE, LateRows, event_time_ms, is_late, judged_by_timestamp, time_type_of,
)
from statekit.runtime.function import (
    FUNCTION_KINDS, Calls, KeyedBroadcastProcessFunction, ProcessFunction, calls_of, check_function,
)
from statekit.runtime.inputs import JobInputs
from statekit.runtime.metrics import (
    METRICS_PROPERTY, EpochMetrics, MetricsListener, TaskMetrics, check_listener, elapsed_ms, publish,
)
from statekit.runtime.grouped_rows import GroupedRows
from statekit.runtime.savepoints import snapshot_as_savepoint, write_savepoint
from statekit.checkpoint.snapshot_format import format_property
from statekit.runtime.task import (
    DEFAULT_TTL_SWEEP_SECONDS, PROCESSING_TIME, KeyedTask, TaskRestore, job_key_serializer, restore_trusted,
    wall_clock_ms,
)
from statekit.spi.backend import SnapshotFormat, SnapshotOptions, SnapshotType, StateBackend, SubtaskInfo
from statekit.spi.key_groups import (
    check_parallelism, default_max_parallelism, key_group_for_key, key_groups_for_keys, operator_index_for_key_group,
    spark_key,
)
from statekit.spi.errors import ConfigurationError, RestoreError
from statekit.spi.names import check_job_id, check_operator_id
from statekit.spi.serializer import TypeSerializer, trusting
from statekit.spi.storage import CheckpointStorage, CheckpointStreams
from statekit.spi.timers import MAX_TIMESTAMP, MIN_TIMESTAMP
from statekit.storage.inline import InlineStreams


class LocalRunner:
    """One run of a job: it takes the job's ownership when created (``checkpoint.ownership``)."""

    def __init__(self, function: ProcessFunction,
                 key_selector: Callable[[Any], Any] | Mapping[str, Callable[[Any], Any]], *,
                 parallelism: int = 2, max_parallelism: int | None = None,
                 state_backend: StateBackend | None = None, storage: CheckpointStorage | None = None,
                 job_id: str = "local-job", operator_id: str = "keyed-process",
                 key_types: Sequence[str] | None = None, num_retained: int = 3,
                 local_dir: str | None = None, incremental: bool = False,
                 clock: Callable[[], int] | None = None, ttl_sweep_seconds: float = DEFAULT_TTL_SWEEP_SECONDS,
                 event_time: Callable[[Any], Any] | str | Mapping[str, Any] | None = None, watermark_delay: Any = None,
                 late_rows: str = "drop", checkpoint_format: SnapshotFormat = SnapshotFormat.CANONICAL,
                 key_serializer: TypeSerializer | None = None, trust_pickle: bool = False,
                 signing_secret: str | None = None, listener: MetricsListener | None = None) -> None:
        """``event_time``: a record's event time (epoch ms or a datetime; None, as a null under Spark,
        is processed and moves no watermark), as a function of the record
        or the name of a dict record's field; with ``watermark_delay`` (e.g. ``"10 minutes"``) each
        epoch gets a watermark (``runtime.event_time``) and event-time timers fire.

        A ``KeyedCoProcessFunction`` takes records of two inputs, ``("left", row)`` and
        ``("right", row)`` pairs (``runtime.inputs``); ``key_selector``, ``event_time`` and
        ``watermark_delay`` may be dicts of one per input (``{"left": ..., "right": ...}``), and the
        watermark is the smaller of the inputs' (``InputsEventTime``). A
        ``KeyedBroadcastProcessFunction`` gets each epoch's broadcast rows (``run_epoch(...,
        broadcast=rows)``) on every subtask before its keyed records.

        Keys are written by ``key_serializer``, else as the restored state wrote them, else by the
        ``key_types`` (``KeyColumnsSerializer``), else by msgpack. ``trust_pickle``: restore state
        that runs code when read (pickle), as ``spark.statekit.restore.trust-pickle`` does (a native
        checkpoint format of pickles, the heap's, implies it). ``signing_secret`` (default: the
        environment variable ``STATEKIT_CHECKPOINT_SIGNING_SECRET``) signs the checkpoints and
        savepoints and must have signed what is restored (``checkpoint.signing``). ``listener`` is
        called with each epoch's ``runtime.metrics.EpochMetrics`` once its checkpoint is committed;
        the metrics are recorded with the checkpoint too, as under Spark."""
        from statekit.backends.heap import HeapStateBackend
        from statekit.registry import storage_class

        check_function(function, FUNCTION_KINDS)
        self.inputs = JobInputs.of(function, key_selector, event_time)
        check_job_id(job_id)
        check_operator_id(operator_id)
        self.function = function
        self.max_parallelism = max_parallelism or default_max_parallelism(parallelism)
        check_parallelism(parallelism, self.max_parallelism)
        self.parallelism = parallelism
        self.state_backend = state_backend or HeapStateBackend()
        self.checkpoint_storage = storage or storage_class("jobmanager", "storage")()
        self.storage = self.checkpoint_storage.create_access(job_id)
        self.ownership = JobOwnership(self.storage, job_id, BOUNDED)
        self.signing_secret = signing_secret
        with signing(signing_secret):  # the store reads the metadata of every retained checkpoint
            self.store = CheckpointStore(self.storage, num_retained, ownership=self.ownership)
            self.ownership.begin_epoch(self.store.latest())
        self.job_id = job_id
        self.operator_id = operator_id
        self.key_types = key_types
        self.local_dir = local_dir
        self.incremental = incremental and self.state_backend.capabilities.incremental_snapshots
        self.checkpoint_format = checkpoint_format
        self.key_serializer = key_serializer
        self.trust_pickle = trust_pickle
        self._restore_override: tuple[CheckpointMetadata, CheckpointStreams] | None = None
        #: each epoch's processing time in epoch milliseconds, read once when the epoch starts
        self.clock = clock or wall_clock_ms
        self.ttl_sweep_seconds = ttl_sweep_seconds
        self._processing_time_ms = 0
        self.event_time = self.inputs.event_time_rule(watermark_delay, late_rows)
        self._element_times = self.inputs.element_times()
        self._watermark_ms = MIN_TIMESTAMP
        self._event_time_properties: dict[str, Any] = {}
        #: the epoch's largest event time (of each input) and its late rows so far (the runner's and
        #: the function's), and the type of its records' event times (``time_type_of``: windows give
        #: bounds of it)
        self._largest_event_times = [MIN_TIMESTAMP] * len(self.inputs.names)
        self._late_count = 0
        self._event_time_type: str | None = None
        #: under ``late_rows="side_output"``: the last epoch's late records, in the order found
        self.late_output: list[Any] = []
        #: the epoch's subtasks' metrics, its late records per subtask, and the last committed epoch's metrics
        self._task_metrics: list[TaskMetrics] = []
        self._late_by_subtask: list[int] = []
        self.listeners: list[MetricsListener] = [check_listener(listener)] if listener is not None else []
        self.last_metrics: EpochMetrics | None = None

    # --- configuration between epochs
    def rescale(self, parallelism: int) -> None:
        """Run the next epochs with another parallelism; state follows the key groups."""
        check_parallelism(parallelism, self.max_parallelism)
        self.parallelism = parallelism

    def restore_from(self, metadata: CheckpointMetadata, streams: CheckpointStreams,
                     mode: RestoreMode = RestoreMode.NO_CLAIM, pointer: Any = None) -> None:
        """Make the next epoch restore from ``metadata`` (e.g. a savepoint) instead of the latest
        checkpoint of this runner. In no-claim mode its files are never deleted by this job."""
        check_max_parallelism(metadata.operator(self.operator_id), self.max_parallelism)
        self._restore_override = (metadata, streams)
        restored = CompletedCheckpoint(pointer, metadata)
        with signing(self.signing_secret):
            self.store = CheckpointStore(self.storage, self.store.num_retained, restored, mode, self.ownership)

    # --- epochs
    def run_epoch(self, records: Iterable[Any] = (), checkpoint_id: int | None = None, *,
                  end_of_input: bool = False, broadcast: Sequence[Any] = ()) -> list[Any]:
        """Process ``records`` as one epoch, commit its checkpoint, return the outputs.
        ``end_of_input``: the records are the last of the input, as at the end of a bounded input
        in Flink: after them the watermark moves to the largest timestamp, so every event-time
        timer fires (every window closes, every session ends), and later epochs find every
        record late. Under ``late_rows="side_output"`` the epoch's late records are in
        ``late_output`` afterwards. ``broadcast``: the epoch's broadcast rows, in order, for a
        ``KeyedBroadcastProcessFunction`` (they carry no event time)."""
        if broadcast and not isinstance(self.function, KeyedBroadcastProcessFunction):
            raise ConfigurationError(f"broadcast rows are for a KeyedBroadcastProcessFunction, and "
                                     f"{type(self.function).__name__} is not one")
        with signing(self.signing_secret):
            return self._run_epoch(records, checkpoint_id, end_of_input, list(broadcast))

    def _run_epoch(self, records: Iterable[Any], checkpoint_id: int | None, end_of_input: bool,
                   broadcast: list[Any]) -> list[Any]:
        started = time.perf_counter()
        epoch = checkpoint_id if checkpoint_id is not None else self._next_checkpoint_id()
        restored = self._restore_point(epoch)
        self._task_metrics, self._late_by_subtask = [], [0] * self.parallelism
        self._processing_time_ms = _processing_time(self.clock)
        previous = restored[0].properties if restored else None
        records = self._start_event_time(records, previous)
        partitions: list[list[tuple[Any, int, Any]]] = [[] for _ in range(self.parallelism)]
        for record in records:
            key, key_group, index, processed = self._placed(record)
            partitions[index].append((key, key_group, processed))
        outputs: list[Any] = []
        subtasks: list[SubtaskState] = []
        try:
            with trusting(restore_trusted(self.trust_pickle, self.state_backend, self.checkpoint_format)):
                key_serializer = self.key_serializer or job_key_serializer(
                    restored[0].operators.get(self.operator_id) if restored else None, self.key_types)
                for i in range(self.parallelism):
                    subtasks.append(self._run_subtask(i, epoch, restored, partitions[i], outputs, key_serializer,
                                                      SnapshotOptions(SnapshotType.CHECKPOINT, self.incremental,
                                                                      self.checkpoint_format), end_of_input,
                                                      broadcast))
        except BaseException:
            self.store.abort(epoch, subtasks)
            raise
        if self.event_time is not None:
            largest = self._largest_event_times if self.inputs.connected else self._largest_event_times[0]
            self._event_time_properties = self.event_time.recorded(previous, largest,  # type: ignore[arg-type]
                                                                   self._late_count, end_of_input)
            if self._event_time_type is not None:
                self._event_time_properties[EVENT_TIME_TYPE] = self._event_time_type
        own = restored[0].checkpoint_id if restored is not None and self._restore_override is None else None
        metrics = EpochMetrics.of(self.job_id, self.operator_id, epoch, self._task_metrics,
                                  self.event_time.late_rows.value if self.event_time is not None else None,
                                  elapsed_ms(started))
        metrics.continue_history(previous)
        self._commit(epoch, subtasks, fresh_start=restored is None, restore_point=own, metrics=metrics)
        return outputs

    def _placed(self, record: Any) -> tuple[Any, int, int, Any]:
        """A record's key, key group, subtask, and what the task processes: the row, or a connected
        job's (input index, row) pair (``KeyedTask.process_side_row_runs``)."""
        side, row = self.inputs.split(record)
        key = spark_key(self.inputs.key_selectors[side](row), self.key_types)
        key_group = key_group_for_key(key, self.max_parallelism, self.key_types)
        return (key, key_group, operator_index_for_key_group(self.max_parallelism, self.parallelism, key_group),
                (side, row) if self.inputs.connected else row)

    def savepoint(self, savepoint_dir: str | None = None) -> CheckpointMetadata:
        """A canonical, self-contained snapshot of the latest completed checkpoint's state, written
        to ``<savepoint_dir>/savepoint-<job>-<id>/`` (or kept inline when no directory is given)."""
        with signing(self.signing_secret), trusting(
                restore_trusted(self.trust_pickle, self.state_backend, self.checkpoint_format)):
            latest = self.store.latest()
            if latest is None:
                raise RestoreError(f"job {self.job_id!r} has no completed checkpoint to take a savepoint of")
            if savepoint_dir is None:
                return snapshot_as_savepoint(latest.metadata, self.streams, self.state_backend,
                                             lambda subtask: InlineStreams(), local_dir=self.local_dir)
            location = self.checkpoint_storage.savepoint_location(savepoint_dir,
                                                                  f"{self.job_id}-{latest.checkpoint_id}")
            return write_savepoint(location, latest.metadata, self.streams, self.state_backend, self.local_dir)[0]

    def latest_metadata(self) -> CheckpointMetadata | None:
        with signing(self.signing_secret):
            latest = self.store.latest()
        return latest.metadata if latest else None

    @property
    def streams(self) -> CheckpointStreams:
        """Streams that read this runner's checkpoints."""
        return self.storage.restore_streams()

    # --- internals
    def _start_event_time(self, records: Iterable[Any], previous: Mapping[str, Any] | None) -> Iterable[Any]:
        """The epoch's watermark from the restore point; records late by their timestamp dropped
        (or kept, or set aside as the side output) and counted, unless the function judges them."""
        self.late_output = []
        if self.event_time is None:
            return records
        watermark, seen = self.event_time.epoch_start(previous)
        policy = self.event_time.late_rows
        by_timestamp = judged_by_timestamp(self.function)
        time_type, typed = (previous or {}).get(EVENT_TIME_TYPE), False
        largest = list(seen) if isinstance(seen, tuple) else [seen]
        split, readers = self.inputs.split, self.inputs.event_times
        kept: list[Any] = []
        late_records: list[Any] = []
        record = side = None
        try:
            for record in records:
                side, row = split(record)
                value = readers[side](row)  # type: ignore[misc]
                if value is not None:  # as under Spark, a record without event time is processed and moves nothing
                    if not typed:  # the epoch's first event time says the type
                        time_type, typed = time_type_of(value), True
                    timestamp = event_time_ms(value)
                    if timestamp > largest[side]:
                        largest[side] = timestamp
                    if by_timestamp and is_late(timestamp, watermark):
                        late_records.append(record)
                        if policy is LateRows.SIDE_OUTPUT:
                            self.late_output.append(record)
                        if policy is not LateRows.PROCESS:
                            continue
                kept.append(record)
        except (KeyError, IndexError, TypeError, ConfigurationError) as exc:  # named here, off the per-row path
            field = self.inputs.event_time_fields[side] if side is not None else None
            raise _event_time_problem(field, record, exc) from exc
        for record in late_records:  # outside the event-time errors: a key selector's own are its
            self._late_by_subtask[self._placed(record)[2]] += 1
        self._watermark_ms = watermark
        self._largest_event_times, self._late_count, self._event_time_type = largest, len(late_records), time_type
        return kept

    def _next_checkpoint_id(self) -> int:
        """After the latest checkpoint, or after a restored snapshot's id (as Flink continues)."""
        latest = self.store.latest()
        restored = self._restore_override[0].checkpoint_id if self._restore_override else 0
        return max(latest.checkpoint_id if latest else 0, restored) + 1

    def _restore_point(self, epoch: int) -> tuple[CheckpointMetadata, CheckpointStreams] | None:
        if self._restore_override is not None:
            return self._restore_override
        lost = self.store.lost_commit()
        if lost is not None:
            raise RestoreError(self.store.lost_commit_message(
                lost, "LocalRunner.restore_from with the metadata of the checkpoint or savepoint to continue from"))
        earlier = self.store.latest_before(epoch)
        if earlier is None:
            self.store.check_fresh_start(epoch)
            return None
        check_max_parallelism(earlier.metadata.operator(self.operator_id), self.max_parallelism)
        return earlier.metadata, self.storage.restore_streams()

    def _run_subtask(self, index: int, epoch: int, restored: tuple[CheckpointMetadata, CheckpointStreams] | None,
                     records: list[tuple[Any, int, Any]], outputs: list[Any], key_serializer: TypeSerializer,
                     options: SnapshotOptions, end_of_input: bool, broadcast: list[Any]) -> SubtaskState:
        subtask = SubtaskInfo(self.job_id, self.operator_id, index, self.parallelism, self.max_parallelism)
        restore = None
        if restored is not None:
            metadata, streams = restored
            assigned = assign(metadata.operator(self.operator_id), index, self.parallelism)
            # handle paths are relative to the job directory that wrote them: only the runner's own
            # checkpoints may be referenced by new ones; an external snapshot never is
            share = self._restore_override is None
            restore = TaskRestore(metadata.checkpoint_id, assigned.keyed, assigned.operator, streams, share,
                                  self._key_groups_of)
        task = KeyedTask.create(copy.deepcopy(self.function), self.state_backend, subtask, epoch,
                                key_serializer=key_serializer, restore=restore, local_dir=self.local_dir)
        metrics, produced_before = task.metrics, len(outputs)
        metrics.restore_source = "storage" if restore is not None else "fresh"
        metrics.count_input(len(records), len({key for key, _, _ in records}))
        self._task_metrics.append(metrics)
        try:
            task.begin_epoch(self._processing_time_ms, self.ttl_sweep_seconds, self._watermark_ms,
                             self._event_time_type, self._element_times)
            if self.event_time is not None and self.event_time.late_rows is LateRows.SIDE_OUTPUT:
                task.context.late_output = self.late_output
            task.open()
            if broadcast:
                task.process_broadcast(broadcast, outputs)
            calls = calls_of(self.function)
            if calls is Calls.SIDE_ROWS:
                task.process_side_row_runs(((key, key_group, (record,)) for key, key_group, record in records), outputs)
            elif calls is Calls.KEY_RUNS:
                task.process_key_runs(_rows_by_key(records).key_runs(), outputs)
            elif calls is Calls.GROUPS and (grouped := _rows_by_key(records, self.function)) is not None:
                produced = task.process_grouped(grouped)
                if produced is not None:
                    outputs.extend(produced if isinstance(produced, list) else produced.to_pylist())
            else:
                task.process_all(records, outputs)
            if end_of_input:
                task.end_input()
            task.fire_timers(outputs)
            self._late_count += task.context.late_rows
            metrics.rows_out = len(outputs) - produced_before
            metrics.late_rows = self._late_by_subtask[index] + task.context.late_rows
            pending = task.snapshot(options)
            return pending.write(self.storage.streams(epoch, subtask.name))
        finally:
            task.close()

    def _key_groups_of(self, keys: Sequence[Any]) -> list[int]:
        """The key groups of restored keys, as ``run_epoch`` computes them."""
        return key_groups_for_keys(keys, self.max_parallelism, self.key_types)

    def _metadata(self, epoch: int, subtasks: list[SubtaskState], fresh_start: bool,
                  restore_point: int | None, metrics: EpochMetrics) -> CheckpointMetadata:
        operator = OperatorState(self.operator_id, self.parallelism, self.max_parallelism, tuple(subtasks))
        return CheckpointMetadata(epoch, self.job_id, {self.operator_id: operator},
                                  properties={"backend": self.state_backend.name, "incremental": self.incremental,
                                              PROCESSING_TIME: self._processing_time_ms, FRESH_START: fresh_start,
                                              RESTORE_POINT: restore_point,
                                              **format_property(self.state_backend, self.incremental,
                                                                self.checkpoint_format),
                                              **self._key_schema(), **self._event_time_properties,
                                              METRICS_PROPERTY: metrics.to_property()})

    def _key_schema(self) -> dict[str, Any]:
        """The key types the key groups were hashed with, for readers (``reading``, ``query``): without
        them a reader infers a key's types from its value (an int as a bigint)."""
        if not self.key_types:
            return {}
        names = ["key"] if len(self.key_types) == 1 else [f"key_{i + 1}" for i in range(len(self.key_types))]
        return {KEY_SCHEMA: {self.operator_id: [list(c) for c in zip(names, self.key_types)]}}

    def _commit(self, epoch: int, subtasks: list[SubtaskState], fresh_start: bool, restore_point: int | None,
                metrics: EpochMetrics) -> None:
        self.store.add(self._metadata(epoch, subtasks, fresh_start, restore_point, metrics))
        self._restore_override = None
        self.last_metrics = metrics
        publish(metrics, self.listeners)


def _event_time_problem(field: str | None, record: Any, exc: Exception) -> ConfigurationError:
    """What is wrong with ``record``'s event time (``exc`` was raised reading it)."""
    if isinstance(exc, ConfigurationError):
        return ConfigurationError(f"record {record!r}: {exc}")
    if field is not None:
        return ConfigurationError(f"record {record!r} has no event-time field {field!r} (event_time={field!r}): give "
                                  f"every record that field (None for a record without event time), or pass "
                                  f"event_time= a function of the record")
    return ConfigurationError(f"the event_time function failed on record {record!r}: {type(exc).__name__}: {exc}; "
                              f"return the record's event time (epoch ms or a datetime), or None")


def _processing_time(clock: Callable[[], Any]) -> int:
    """The epoch's processing time from the runner's ``clock``: whole epoch milliseconds of the
    64-bit range of timestamps (a float is rounded down, as ``int()`` does)."""
    now = clock()
    try:
        ms = int(now)
    except (TypeError, ValueError, OverflowError):  # NaN, infinity, no number
        ms = None
    if ms is None or isinstance(now, bool) or not MIN_TIMESTAMP <= ms <= MAX_TIMESTAMP:
        raise ConfigurationError(f"the LocalRunner's clock returned {now!r}: it must return the processing time as "
                                 f"epoch milliseconds, a finite number within the 64-bit range of timestamps "
                                 f"(e.g. clock=lambda: int(time.time() * 1000))")
    return ms


def _rows_by_key(records: list[tuple[Any, int, Any]], function: ProcessFunction | None = None) -> GroupedRows | None:
    """A ``KeyedBatchFunction``'s or ``KeyedVectorFunction``'s input: the rows (dicts) grouped by key,
    each key's in input order. None for a ``function`` that also takes rows one by one
    (``processes_groups``) where the rows make no Arrow columns (or not the same columns)."""
    by_rows_too = function is not None and function.processes_groups
    names = records[0][2].keys() if records and isinstance(records[0][2], dict) else None
    # keys equal in Python but of other types (1, 1.0, True) are other keys, as in the per-row path
    groups: dict[tuple[type, Any], tuple[Any, int, list[Any]]] = {}
    for key, key_group, row in records:
        if not isinstance(row, dict) or by_rows_too and row.keys() != names:
            if by_rows_too:  # rows that make no columns, or not the same ones
                return None
            raise ConfigurationError(f"a {type(row).__name__} row: a KeyedBatchFunction or KeyedVectorFunction gets "
                                     f"its rows as Arrow columns: give the local runner rows as dicts of column name "
                                     f"to value")
        groups.setdefault((key.__class__, key), (key, key_group, []))[2].append(row)
    try:
        return GroupedRows.of_key_runs(groups.values())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        if by_rows_too:  # e.g. a column of both ints and strings
            return None
        raise
