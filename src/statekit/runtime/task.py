"""One subtask's lifecycle, engine-independent: restore -> begin_epoch -> open -> process -> fire
timers -> snapshot (the synchronous part; ``snapshot_upload`` runs the asynchronous part) -> close.

Both the local runner and the Spark executor code drive this class.
"""
from __future__ import annotations

import contextlib
import inspect
import time
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from statekit.checkpoint.metadata import OperatorState, SubtaskState
from statekit.runtime.event_time import ElementTimes
from statekit.runtime.function import (
    BroadcastContext, Calls, CheckpointedFunction, FunctionInitializationContext, FunctionSnapshotContext,
    KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedContext, ProcessFunction, calls_of,
)
from statekit.runtime.grouped_rows import GroupedRows, output_columns
from statekit.runtime.metrics import TaskMetrics, elapsed_ms
from statekit.runtime.timers import domain_of
from statekit.progress import ProgressStreams, progress
from statekit.serializers import resolve
from statekit.spi.backend import (
    KeyedBackendParams, KeyedStateBackend, OperatorBackendParams, OperatorStateBackend, PendingSnapshot,
    SnapshotFormat, SnapshotOptions, StateBackend, SubtaskInfo,
)
from statekit.spi.errors import FunctionResultError
from statekit.spi.handles import KeyedStateHandle, OperatorStateHandle
from statekit.spi.key_format import restored_key_serializer
from statekit.spi.serializer import TypeSerializer
from statekit.spi.storage import CheckpointStreams
from statekit.spi.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeDomain, Timer, TimerQueue

if TYPE_CHECKING:
    import pyarrow as pa


#: what a function usually returns, taken as it is after one type lookup per call; a generator
#: function (``yield``) always returns a generator, so its results are not looked at at all
_ROW_ITERABLES = frozenset({types.GeneratorType, list, tuple})
#: iterable, but not an iterable of rows: a string would be taken character by character, a dict key by key
_NOT_ROWS = (str, bytes, bytearray, memoryview, Mapping)


#: a subtask restoring at least this many bytes shows a progress bar (on a terminal)
LARGE_RESTORE_BYTES = 64 << 20
#: the default time a subtask spends removing expired TTL entries per epoch
DEFAULT_TTL_SWEEP_SECONDS = 0.2
#: the checkpoint property that records the epoch's processing time (epoch milliseconds)
PROCESSING_TIME = "processing_time_ms"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def checked_rows(produced: Any, function: Any, method: str, key: Any) -> Iterator[Any]:
    """The rows of what ``function.<method>`` returned for ``key`` (anything but None, a list, a
    tuple or a generator; those the callers take directly), or a ``FunctionResultError``."""
    if isinstance(produced, _NOT_ROWS):
        problem = "a single value, not an iterable of rows"
    elif hasattr(produced, "num_rows") and hasattr(produced, "schema"):
        problem = "an Arrow batch or table, which iterates its columns: return its rows (e.g. batch.to_pylist())"
    elif hasattr(produced, "itertuples") and hasattr(produced, "columns"):
        problem = ("a pandas DataFrame, which iterates its column names: return its rows (e.g. "
                   "df.itertuples(index=False, name=None)), or from process_groups its columns "
                   "(pyarrow.Table.from_pandas(df, preserve_index=False))")
    else:
        try:
            return iter(produced)
        except TypeError:
            problem = "not iterable"
    raise FunctionResultError(
        f"{type(function).__name__}.{method} returned {type(produced).__name__} {short_repr(produced)} for key "
        f"{short_repr(key)}: {problem}. Return None, or an iterable of rows (a list, or yield each row): e.g. "
        f"`return [row]` or `yield row`, where a row is a tuple or a dict matching the output schema")


@contextlib.contextmanager
def _restore_progress(subtask: SubtaskInfo, restore: TaskRestore | None,
                      keyed_too: bool) -> Iterator[CheckpointStreams | None]:
    """The streams a subtask restores from: with a bar (``statekit.progress``) advanced by the
    bytes read when its state is at least ``LARGE_RESTORE_BYTES`` (the keyed state's only where
    ``keyed_too``: else it is there already)."""
    if restore is None:
        yield None
        return
    handles = [*(restore.keyed if keyed_too else ()), *(h for h in restore.operator if h is not None)]
    total = sum(handle.state_size for handle in handles)
    if total < LARGE_RESTORE_BYTES:
        yield restore.streams
        return
    with progress(f"restoring {subtask.name} from checkpoint {restore.checkpoint_id}", total) as advance:
        yield ProgressStreams(restore.streams, advance)


def _poll_first(queues: list[TimerQueue], up_to: int) -> Timer | None:
    """The next due timer of several queues: from the queue whose earliest timer is earliest."""
    if len(queues) == 1:
        return queues[0].poll(up_to)
    earliest: tuple[int, TimerQueue] | None = None
    for queue in queues:
        timestamp = queue.peek_timestamp()
        if timestamp is not None and timestamp <= up_to and (earliest is None or timestamp < earliest[0]):
            earliest = (timestamp, queue)
    return None if earliest is None else earliest[1].poll(up_to)


def _stamped(rows: Iterable[Any], of_row: Callable[[Any], int | None],
             set_element_time: Callable[[int | None], None]) -> Iterator[Any]:
    """``rows``, each one's event time made the backend's element time before it is processed."""
    for row in rows:
        set_element_time(of_row(row))
        yield row


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (for error messages)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class TaskRestore:
    """What a subtask restores from: handles of one completed checkpoint or savepoint."""

    checkpoint_id: int
    keyed: Sequence[KeyedStateHandle]
    operator: Sequence[OperatorStateHandle | None]
    streams: CheckpointStreams
    #: False for a no-claim restore: the new checkpoints must not reference the restored files
    share_files: bool = True
    #: the key groups of keys as the job computes them, when known (``KeyedBackendParams.key_groups_of``)
    key_groups_of: Callable[[Sequence[Any]], Sequence[int]] | None = None


def restore_trusted(trust_pickle: bool, state_backend: StateBackend, checkpoint_format: SnapshotFormat) -> bool:
    """Whether a job restores state that runs code when read (``spi.serializer.trusting``): it
    trusts its checkpoints' writers, or it writes them in a native format of pickles itself."""
    return trust_pickle or checkpoint_format is SnapshotFormat.NATIVE and state_backend.native_snapshots_run_code


def job_key_serializer(restored: OperatorState | None, key_types: Sequence[str] | None) -> TypeSerializer:
    """The key serializer of a job's epoch, the same for every subtask: as its restored state wrote
    its keys (keys are never migrated), else by the key columns' types, else the default."""
    if restored is not None:
        found = restored_key_serializer([h for subtask in restored.subtasks for h in subtask.keyed])
        if found is not None:
            return found
    if key_types:
        from statekit.serializers.key_columns import KeyColumnsSerializer  # noqa: PLC0415 - loads pyspark's types

        return KeyColumnsSerializer(key_types)
    return resolve(None)


class PendingTaskSnapshot:
    """The synchronous part of a task snapshot; ``write`` is the asynchronous part, recorded in
    ``metrics`` (its time, and its bytes new or reused from the ``restored`` handles)."""

    def __init__(self, keyed: PendingSnapshot, operator: PendingSnapshot, metrics: TaskMetrics | None = None,
                 restored: Sequence[Any] = (), incremental: bool = False) -> None:
        self._keyed = keyed
        self._operator = operator
        self._metrics, self._restored, self._incremental = metrics, restored, incremental

    def write(self, streams: CheckpointStreams) -> SubtaskState:
        started = time.perf_counter()
        keyed = self._keyed.write(streams)
        operator = self._operator.write(streams)
        state = SubtaskState((keyed,) if keyed is not None else (), operator)  # type: ignore[arg-type]
        if self._metrics is not None:
            self._metrics.record_snapshot(state, self._restored, self._incremental, elapsed_ms(started))
        return state

    def release(self) -> None:
        self._keyed.release()
        self._operator.release()


class KeyedTask:
    """One subtask of one epoch over its keyed and operator backends (see ``create``)."""

    def __init__(self, function: ProcessFunction, subtask: SubtaskInfo, checkpoint_id: int,
                 keyed_backend: KeyedStateBackend, operator_backend: OperatorStateBackend,
                 restore: TaskRestore | None = None) -> None:
        self.function = function
        #: seconds spent at most removing expired TTL entries before each snapshot
        self.ttl_sweep_seconds = DEFAULT_TTL_SWEEP_SECONDS
        self.subtask = subtask
        self.checkpoint_id = checkpoint_id
        self.restore = restore
        self.keyed_backend = keyed_backend
        self.operator_backend = operator_backend
        self.context = KeyedContext(keyed_backend, subtask, checkpoint_id, operator_backend=operator_backend)
        #: how the rows' event times are read (None: the job has no event time)
        self.element_times: ElementTimes | None = None
        #: the epoch's figures (``runtime.metrics``); the engine adds what it measures itself
        self.metrics = TaskMetrics(subtask.subtask_index)
        self._opened = False

    @classmethod
    def create(cls, function: ProcessFunction, state_backend: StateBackend, subtask: SubtaskInfo,
               checkpoint_id: int, *, key_serializer: TypeSerializer | None = None,
               restore: TaskRestore | None = None, local_dir: str | None = None, working_dir: str | None = None,
               resume_local_state: bool = False, keyed_backend: KeyedStateBackend | None = None) -> "KeyedTask":
        """Create the backends, restoring them from ``restore`` (or, with ``resume_local_state``,
        reopening ``working_dir``, which holds the same state). An open ``keyed_backend`` that
        already holds the restore point is used as it is; operator state is always restored. Keys
        are written by ``key_serializer``, else as the restored state wrote them, else by default.
        State that runs code when read is restored only within the caller's ``trusting(True)``."""
        started = time.perf_counter()
        if key_serializer is None and restore is not None:
            key_serializer = restored_key_serializer(restore.keyed)
        with _restore_progress(subtask, restore, keyed_backend is None and not resume_local_state) as streams:
            keyed = keyed_backend or state_backend.create_keyed_backend(KeyedBackendParams(
                subtask=subtask, key_serializer=resolve(key_serializer),
                restore_handles=tuple(restore.keyed) if restore else (), restore_streams=streams,
                local_dir=local_dir, share_restored_files=restore.share_files if restore else True,
                working_dir=working_dir, resume_local_state=resume_local_state,
                key_groups_of=restore.key_groups_of if restore else None))
            try:
                operator = state_backend.create_operator_backend(OperatorBackendParams(
                    subtask=subtask, restore_handles=tuple(restore.operator) if restore else (),
                    restore_streams=streams))
            except BaseException:
                keyed.dispose()
                raise
        task = cls(function, subtask, checkpoint_id, keyed, operator, restore)
        task.metrics.restore_ms = elapsed_ms(started)
        return task

    def begin_epoch(self, processing_time_ms: int, ttl_sweep_seconds: float = DEFAULT_TTL_SWEEP_SECONDS,
                    watermark_ms: int = MIN_TIMESTAMP, event_time_type: str | None = None,
                    element_times: ElementTimes | None = None) -> None:
        """The epoch's processing time and watermark (both recorded, so identical on replay): what
        state TTL measures against and timers fire by; the sweep budget of its snapshot; and how
        the rows' event times are read (``element_times``), which event-time TTL writes with."""
        self.keyed_backend.set_processing_time(processing_time_ms)
        self.context.time.processing_time_ms = int(processing_time_ms)
        self.set_watermark(watermark_ms)
        self.keyed_backend.set_element_time(None)
        self.context.time.event_time_type = event_time_type
        self.element_times = element_times
        self.ttl_sweep_seconds = ttl_sweep_seconds

    def set_watermark(self, watermark_ms: int) -> None:
        """The watermark timers fire by and event-time TTL expires by."""
        self.context.time.watermark_ms = int(watermark_ms)
        self.keyed_backend.set_watermark(watermark_ms)

    def open(self) -> None:
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(FunctionInitializationContext(
                self.operator_backend, self.context, self.restore.checkpoint_id if self.restore else None))
        self.function.open(self.context)
        self._opened = True

    def process_all(self, records: Iterable[tuple[Any, int, Any]], out: list[Any]) -> None:
        """Process (key, key group, row) records in order; appends the output rows to ``out``."""
        self.process_row_runs(((key, key_group, (row,)) for key, key_group, row in records), out)

    def process_row_runs(self, runs: Iterable[tuple[Any, int, Iterable[Any]]], out: list[Any]) -> None:
        """For a ``KeyedProcessFunction`` (and the keyed rows of a ``KeyedBroadcastProcessFunction``):
        ``runs`` are (key, key group, rows of the key), each row processed by its own call, the key
        made current once per run; appends the output to ``out``. While a state with event-time TTL
        is registered, each row's event time is the backend's element time as it is processed
        (checked once per key: nothing is added per row otherwise)."""
        assert calls_of(self.function) is Calls.ROWS or self.function.processes_groups
        self._process_runs(runs, self.function.process, "process", out)  # type: ignore[union-attr]

    def process_side_row_runs(self, runs: Iterable[tuple[Any, int, Iterable[tuple[int, Any]]]],
                              out: list[Any]) -> None:
        """For a ``KeyedCoProcessFunction``: ``runs`` are (key, key group, (input, row) pairs of the
        key in order), input 0 the first (``process_left``) and 1 the second (``process_right``)."""
        function = self.function
        assert isinstance(function, KeyedCoProcessFunction)
        sides = (function.process_left, function.process_right)

        def process(pair: tuple[int, Any], ctx: KeyedContext) -> Iterable[Any] | None:
            return sides[pair[0]](pair[1], ctx)

        self._process_runs(runs, process, "process_left/process_right", out)

    def _process_runs(self, runs: Iterable[tuple[Any, int, Iterable[Any]]],
                      process: Callable[[Any, KeyedContext], Iterable[Any] | None], method: str,
                      out: list[Any]) -> None:
        backend = self.keyed_backend
        set_key = backend.set_current_key
        ctx = self.context
        extend, usual, check = out.extend, _ROW_ITERABLES, not inspect.isgeneratorfunction(process)
        of_row = self.element_times.of_row if self.element_times is not None else None
        for key, key_group, rows in runs:
            set_key(key, key_group)
            if of_row is not None and backend.uses_element_time:
                rows = _stamped(rows, of_row, backend.set_element_time)
            for row in rows:
                produced = process(row, ctx)
                if produced is not None:
                    if check and produced.__class__ not in usual:
                        produced = checked_rows(produced, self.function, method, key)
                    extend(produced)

    def process_broadcast(self, rows: Iterable[Any], out: list[Any]) -> None:
        """For a ``KeyedBroadcastProcessFunction``, before the epoch's keyed rows: each broadcast
        row in order, broadcast state writable and keyed state reached by ``apply_to_keyed_state``."""
        function = self.function
        assert isinstance(function, KeyedBroadcastProcessFunction)
        context = BroadcastContext(self.context)
        for row in rows:
            produced = function.process_broadcast(row, context)
            if produced is not None:
                out.extend(produced if produced.__class__ in _ROW_ITERABLES
                           else checked_rows(produced, function, "process_broadcast", None))

    def process_key_runs(self, runs: Iterable[tuple[Any, int, Any]], out: list[Any]) -> None:
        """For a ``KeyedBatchFunction``: ``runs`` are (key, key group, that key's rows). While a
        state with event-time TTL is registered, the largest event time of the key's rows is the
        backend's element time during the call."""
        backend = self.keyed_backend
        set_key = backend.set_current_key
        process_rows = self.function.process_rows  # type: ignore[union-attr]
        ctx = self.context
        extend, usual, check = out.extend, _ROW_ITERABLES, not inspect.isgeneratorfunction(process_rows)
        of_rows = self.element_times.of_rows if self.element_times is not None else None
        for key, key_group, rows in runs:
            set_key(key, key_group)
            if of_rows is not None and backend.uses_element_time:
                backend.set_element_time(of_rows(rows))
            produced = process_rows(key, rows, ctx)
            if produced is not None:
                if check and produced.__class__ not in usual:
                    produced = checked_rows(produced, self.function, "process_rows", key)
                extend(produced)

    def process_grouped(self, groups: GroupedRows) -> "pa.Table | list[Any] | None":
        """For a ``KeyedVectorFunction`` (or a function that ``processes_groups``): one call over a
        batch grouped by key. Returns its output
        as columns (a table), as a list of rows, or None (also for a batch without rows). While a
        state with event-time TTL is registered, the largest event time of the whole batch is the
        backend's element time during the call: its state is written for many keys at once."""
        if groups.num_keys == 0:
            return None
        if self.element_times is not None and self.keyed_backend.uses_element_time:
            self.keyed_backend.set_element_time(self.element_times.of_rows(groups.rows))
        produced = self.function.process_groups(groups, self.context)  # type: ignore[union-attr]
        if produced is None:
            return None
        columns = output_columns(produced)
        if columns is not None:
            return columns
        if produced.__class__ in _ROW_ITERABLES:
            return list(produced)
        return list(checked_rows(produced, self.function, "process_groups", f"<{groups.num_keys} keys>"))

    def end_input(self) -> None:
        """The input has ended (Flink's end of a bounded input): the watermark moves to the largest
        timestamp, so that ``fire_timers`` fires every event-time timer, registered so far or
        while firing (windows close, sessions end), and every entry of event-time TTL expires (the
        epoch's snapshot holds none)."""
        self.set_watermark(MAX_TIMESTAMP)

    def fire_timers(self, out: list[Any]) -> int:
        """After the epoch's rows: fire every due timer, the function's ``on_timer`` output going to
        ``out``. Event-time timers up to the watermark first, then processing-time timers up to the
        processing time; within a domain in the order of ``spi.timers`` (by timestamp), timers of
        several services merged. A timer registered while firing fires too if it is due. Returns
        how many fired. Timers have no element time: event-time TTL writes in ``on_timer`` are at
        the watermark, which is what an event-time timer's own time would give (a timer fires once
        the watermark reached it). At the end of the input, event-time TTL state is read in each
        event-time timer as of the timer's time, not as of the largest timestamp (at which every
        entry has expired), and expires entirely after the timers."""
        backend, ctx, on_timer = self.keyed_backend, self.context, self.function.on_timer
        backend.set_element_time(None)
        draining = ctx.time.watermark_ms == MAX_TIMESTAMP
        fired = 0
        for domain, up_to in ((TimeDomain.EVENT_TIME, ctx.time.watermark_ms),
                              (TimeDomain.PROCESSING_TIME, ctx.time.processing_time_ms)):
            services, queues = ctx.timer_services_used, self._timer_queues(domain)
            ctx.time_domain = domain
            try:
                while (timer := _poll_first(queues, up_to)) is not None:
                    backend.set_current_key(timer.key, timer.key_group)
                    ctx.timer = timer
                    if draining and domain is TimeDomain.EVENT_TIME:
                        backend.set_watermark(timer.timestamp)
                    produced = on_timer(timer.timestamp, ctx)
                    if produced is not None:
                        out.extend(produced if produced.__class__ in _ROW_ITERABLES
                                   else checked_rows(produced, self.function, "on_timer", timer.key))
                    fired += 1
                    if ctx.timer_services_used != services:  # on_timer used another service: its queues too
                        services, queues = ctx.timer_services_used, self._timer_queues(domain)
            finally:
                ctx.timer = ctx.time_domain = None
                if draining:
                    backend.set_watermark(MAX_TIMESTAMP)
        self.metrics.timers_fired += fired
        return fired

    def _timer_queues(self, domain: TimeDomain) -> list[TimerQueue]:
        backend = self.keyed_backend
        return [backend.create_timer_queue(name) for name in backend.state_names() if domain_of(name) is domain]

    def snapshot(self, options: SnapshotOptions = SnapshotOptions(), measure: bool = True) -> PendingTaskSnapshot:
        """The synchronous part of the epoch's snapshot (after the function's own hook and a sweep
        of expired TTL entries, bounded by ``ttl_sweep_seconds``), its time and the expired entries
        removed (by the sweep, and by the epoch's reads) recorded in ``metrics``; with ``measure``,
        the states' sizes too (``state_sizes``)."""
        started, metrics, backend = time.perf_counter(), self.metrics, self.keyed_backend
        metrics.ttl_removed += backend.sweep_expired(self.ttl_sweep_seconds) + backend.ttl_removed_on_read
        backend.ttl_removed_on_read = 0
        if isinstance(self.function, CheckpointedFunction):
            self.function.snapshot_state(FunctionSnapshotContext(self.checkpoint_id))
        metrics.timers_registered = self.context.time.timers_registered
        restored = [*self.restore.keyed, *(h for h in self.restore.operator if h is not None)] if self.restore else []
        pending = PendingTaskSnapshot(self.keyed_backend.snapshot(self.checkpoint_id, options),
                                      self.operator_backend.snapshot(self.checkpoint_id), metrics, restored,
                                      options.incremental)
        if measure:
            metrics.record_state_sizes(self.keyed_backend.state_sizes())
        metrics.sync_snapshot_ms = elapsed_ms(started)
        return pending

    def close(self, keep_backends: bool = False) -> None:
        """Close the function, and dispose the backends unless the caller keeps them (local
        recovery); if the function's ``close`` fails, they are disposed regardless."""
        try:
            if self._opened:
                self.function.close()
        except BaseException:
            keep_backends = False
            raise
        finally:
            if not keep_backends:
                try:
                    self.keyed_backend.dispose()
                finally:
                    self.operator_backend.dispose()
