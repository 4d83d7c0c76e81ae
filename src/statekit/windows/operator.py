"""The window operator (Flink's ``WindowOperator``), built only on keyed state, namespaces and
timers, so it runs on every backend and its windows survive restores, rescaling and backend
switches like any state.

A window's contents are state in the window's namespace (an accumulator, or the elements, which
an evictor may thin out when it fires). Its trigger (``windows.triggers``) decides on each element
and on each of its timers whether the window fires and purges; by default it fires at the
window's last millisecond. A cleanup timer clears the window at its end plus the allowed lateness
(with lateness, a late element fires the window again); global windows never end. Session windows
merge as Flink's ``MergingWindowSet`` does: each key keeps a map from its sessions to the window
whose namespace holds their contents (packed into one tuple of integers), so a session that grows
moves no state; when an element bridges two sessions, the later one's contents are merged into
the earlier one's, and the trigger merges its state. As in Flink, a session element is late only
if the session it merges into is: its own window may be past the allowed lateness while the live
session it touches is not. Cleanup times stop at the largest timestamp, as Flink's ``cleanupTime``
does. The operator judges lateness itself (``judges_lateness``): the runner hands it every row,
and it reports those that every window skipped as late (dropped, or the job's side output).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from statekit.runtime.event_time import event_time_ms
from statekit.runtime.function import KeyedContext, KeyedProcessFunction
from statekit.runtime.grouped_rows import GroupedRows
from statekit.runtime.timers import TimerService
from statekit.spi.descriptors import AggregateFunction, ListStateDescriptor, ValueStateDescriptor
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import ListState, ValueState
from statekit.spi.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeDomain
from statekit.windows.aggregates import VectorizedAggregate
from statekit.windows.assigners import (
    SessionWindows, SlidingWindows, TumblingWindows, WindowAssigner, window_duration_ms,
)
from statekit.windows.batch import (
    NotAggregated, WindowGroups, aggregated, aligned_windows, event_times_ms, values_of, window_groups,
)
from statekit.windows.batch import sessions as batch_sessions
from statekit.windows.evictors import Evictor, TimestampedValue
from statekit.windows.time_window import TimeWindow, TimeWindowSerializer
from statekit.windows.triggers import EventTimeTrigger, ProcessingTimeTrigger, Trigger, TriggerContext

#: the timer service of window operators (``_timers/windows/<domain>``)
WINDOW_TIMERS = "windows"
_WINDOWS = TimeWindowSerializer()


class ProcessWindowFunction(ABC):
    """Computes a window's output from all of its elements (Flink's ``ProcessWindowFunction``)."""

    @abstractmethod
    def process(self, key: Any, window: TimeWindow, elements: list[Any], ctx: KeyedContext) -> Iterable[Any] | None:
        """Return or yield the output rows of ``window`` of ``key``."""


class _Contents(ABC):
    """How a window keeps what it was given: one accumulator, or every element."""

    @abstractmethod
    def open(self, ctx: KeyedContext) -> None: ...

    #: the elements' event times are kept too (``add``'s ``timestamp``; evictors read them)
    keeps_times = False

    @abstractmethod
    def add(self, window: TimeWindow, value: Any, timestamp: int | None = None) -> None: ...

    @abstractmethod
    def emit(self, key: Any, window: TimeWindow, state_window: TimeWindow, ctx: KeyedContext) -> Iterable[Any]: ...

    @abstractmethod
    def merge(self, target: TimeWindow, source: TimeWindow) -> None:
        """Move ``source``'s contents into ``target``'s."""

    @abstractmethod
    def clear(self, window: TimeWindow) -> None: ...


class _Accumulated(_Contents):
    def __init__(self, function: AggregateFunction, emit: Callable[[Any, TimeWindow, Any], Any],
                 serializer: TypeSerializer | None) -> None:
        self.function, self._emit, self._serializer = function, emit, serializer

    def open(self, ctx: KeyedContext) -> None:
        self._state = ctx.get_state(ValueStateDescriptor("window-accumulator", self._serializer), _WINDOWS)

    def _at(self, window: TimeWindow) -> Any:
        self._state.set_current_namespace(window)
        return self._state.value()

    def add(self, window: TimeWindow, value: Any, timestamp: int | None = None) -> None:
        accumulator = self._at(window)
        if accumulator is None:
            accumulator = self.function.create_accumulator()
        self._state.update(self.function.add(value, accumulator))

    def add_accumulated(self, window: TimeWindow, accumulator: Any) -> None:
        """Merge the accumulator of several elements (the vectorized path's) into the window's."""
        kept = self._at(window)
        self._state.update(accumulator if kept is None else self.function.merge(kept, accumulator))

    def emit(self, key: Any, window: TimeWindow, state_window: TimeWindow, ctx: KeyedContext) -> Iterable[Any]:
        accumulator = self._at(state_window)
        if accumulator is None:
            return ()
        if self._emit is default_emit:  # in the type of the job's event time (a Spark timestamp column's)
            return (default_emit(key, window, self.function.get_result(accumulator), ctx.time.event_time_type),)
        return (self._emit(key, window, self.function.get_result(accumulator)),)

    def merge(self, target: TimeWindow, source: TimeWindow) -> None:
        moved = self._at(source)
        if moved is None:
            return
        self._state.clear()
        kept = self._at(target)
        self._state.update(moved if kept is None else self.function.merge(kept, moved))

    def clear(self, window: TimeWindow) -> None:
        self._state.set_current_namespace(window)
        self._state.clear()


class _Collected(_Contents):
    def __init__(self, function: ProcessWindowFunction, serializer: TypeSerializer | None) -> None:
        self.function, self._serializer = function, serializer

    def open(self, ctx: KeyedContext) -> None:
        self._state = ctx.get_state(ListStateDescriptor("window-elements", self._serializer), _WINDOWS)

    def add(self, window: TimeWindow, value: Any, timestamp: int | None = None) -> None:
        self._state.set_current_namespace(window)
        self._state.add(value)

    def emit(self, key: Any, window: TimeWindow, state_window: TimeWindow, ctx: KeyedContext) -> Iterable[Any]:
        self._state.set_current_namespace(state_window)
        elements = self._state.get()
        return (self.function.process(key, window, elements, ctx) or ()) if elements else ()

    def merge(self, target: TimeWindow, source: TimeWindow) -> None:
        _move_list(self._state, source, target)

    def clear(self, window: TimeWindow) -> None:
        self._state.set_current_namespace(window)
        self._state.clear()


class _Evicting(_Collected):
    """Every element and its event time (two lists in step), evicted as the evictor says when the
    window fires (Flink's ``EvictingWindowOperator``): the function sees what ``evict_before``
    keeps, and the window keeps what ``evict_after`` keeps of that."""

    keeps_times = True

    def __init__(self, function: ProcessWindowFunction, serializer: TypeSerializer | None, evictor: Evictor) -> None:
        super().__init__(function, serializer)
        self._evictor = evictor

    def open(self, ctx: KeyedContext) -> None:
        super().open(ctx)
        self._times = ctx.get_state(ListStateDescriptor("window-element-times"), _WINDOWS)

    def add(self, window: TimeWindow, value: Any, timestamp: int | None = None) -> None:
        super().add(window, value)
        self._times.set_current_namespace(window)
        self._times.add(_NO_TIME if timestamp is None else timestamp)

    def emit(self, key: Any, window: TimeWindow, state_window: TimeWindow, ctx: KeyedContext) -> Iterable[Any]:
        self._state.set_current_namespace(state_window)
        self._times.set_current_namespace(state_window)
        values = self._state.get()
        if not values:
            return ()
        elements = [TimestampedValue(None if t == _NO_TIME else t, v) for t, v in zip(self._times.get(), values)]
        kept = list(self._evictor.evict_before(elements, window, ctx))
        output = list(self.function.process(key, window, [e.value for e in kept], ctx) or ()) if kept else []
        kept = list(self._evictor.evict_after(kept, window, ctx))
        if len(kept) != len(elements):
            self._state.update([e.value for e in kept])
            self._times.update([_NO_TIME if e.timestamp is None else e.timestamp for e in kept])
        return output

    def merge(self, target: TimeWindow, source: TimeWindow) -> None:
        super().merge(target, source)
        _move_list(self._times, source, target)

    def clear(self, window: TimeWindow) -> None:
        super().clear(window)
        self._times.set_current_namespace(window)
        self._times.clear()


def _move_list(state: ListState, source: TimeWindow, target: TimeWindow) -> None:
    """Append ``source``'s elements of a list state to ``target``'s and clear ``source``'s."""
    state.set_current_namespace(source)
    moved = state.get()
    state.clear()
    state.set_current_namespace(target)
    state.add_all(moved)


#: a kept element's time where the window operator reads no event time (list elements cannot be None)
_NO_TIME = MIN_TIMESTAMP


def default_emit(key: Any, window: TimeWindow, result: Any, time_type: str | None = None) -> tuple[Any, ...]:
    """``(key columns..., window start, window end, result)``: the window's bounds in epoch
    milliseconds, or as datetimes of the job's event-time column's type (``time_type``, a Spark
    ``timestamp`` or ``timestamp_ntz``), as Spark's ``window()`` gives them."""
    return (*(key if isinstance(key, tuple) else (key,)), *window.bounds(time_type), result)


class WindowOperator(KeyedProcessFunction):
    """Windows of each key: ``aggregate`` or ``process`` build one (see ``statekit.windows``)."""

    def __init__(self, assigner: WindowAssigner, contents: _Contents, timestamp: str | Callable[[Any], Any] | None,
                 value: str | Callable[[Any], Any] | None, allowed_lateness: Any, trigger: Trigger | None = None,
                 vectorized: bool | None = None) -> None:
        if not isinstance(assigner, WindowAssigner):
            raise ConfigurationError(f"a window operator needs a WindowAssigner (e.g. TumblingWindows.of('1 hour')), "
                                     f"got {assigner!r}")
        event_time = assigner.domain is TimeDomain.EVENT_TIME
        if event_time and assigner.ends and timestamp is None:
            raise ConfigurationError("event-time windows need timestamp=: the element's event-time column (the "
                                     "job's event_time) or a function of the row")
        if not (value is None or isinstance(value, str) or callable(value)):
            raise ConfigurationError(f"value= needs the element's column name or a function of the row, got {value!r}")
        self.assigner = assigner
        self.contents = contents
        self.timestamp = timestamp
        #: the element's value: a column of the row (which the vectorized path reads as a column too)
        self.value = value
        self._value_of = itemgetter(value) if isinstance(value, str) else value
        self.lateness_ms = window_duration_ms("the window operator", "allowed_lateness", allowed_lateness,
                                              positive=False)
        if self.lateness_ms and not (event_time and assigner.ends):
            raise ConfigurationError("allowed_lateness is for event-time windows that end: processing time is never "
                                     "late, and a global window never ends")
        self.trigger = assigner.default_trigger() if trigger is None else trigger
        if not isinstance(self.trigger, Trigger):
            raise ConfigurationError(f"trigger= needs a Trigger (e.g. windows.CountTrigger.of(100)), got {trigger!r}")
        if timestamp is None and self.trigger.needs_timestamps:
            raise ConfigurationError(f"{self.trigger!r} fires by the elements' event times: give timestamp= (the "
                                     f"element's event-time column, the job's event_time, or a function of the row)")
        if assigner.merging and not self.trigger.can_merge():
            raise ConfigurationError(f"{self.trigger!r} cannot merge windows (its can_merge() is false), which "
                                     f"{type(assigner).__name__} needs: give a trigger that can")
        #: windows end at the watermark: the operator gets every row and judges it by its windows'
        #: cleanup times (``KeyedFunction.judges_lateness``)
        self.judges_lateness = event_time and assigner.ends
        #: elements are timed by their event time (``timestamp=``), read for those windows and for
        #: contents that keep it (evictors)
        self._event_time_windows = event_time and timestamp is not None
        self._reads_event_time = timestamp is not None and (event_time or contents.keeps_times)
        #: the default trigger's timer at a window's end is its cleanup timer too (no lateness): one
        #: timer, registered and deleted once (a timer queue's add and remove cost microseconds)
        self._trigger_timer_cleans_up = not self.lateness_ms and assigner.ends and type(self.trigger) is (
            EventTimeTrigger if event_time else ProcessingTimeTrigger)
        not_vectorized = self._not_vectorized()
        if vectorized and not_vectorized:
            raise ConfigurationError(f"vectorized=True, but this window operator aggregates row by row: "
                                     f"{not_vectorized}")
        #: batches are assigned to windows and aggregated with Arrow (``windows.batch``), keys
        #: with rows that may come late (or at the ends of time) row by row (``process_groups``)
        self.processes_groups = vectorized is not False and not not_vectorized

    def _not_vectorized(self) -> str:
        """Why the operator cannot aggregate batches with Arrow ("" when it can)."""
        contents, assigner = self.contents, self.assigner
        function = contents.function if isinstance(contents, _Accumulated) else None
        if not isinstance(function, VectorizedAggregate):
            return ("its windows keep every element (windows.process)" if function is None else
                    f"{type(function).__name__} is not a VectorizedAggregate (windows.Count, Sum, Min, Max, Mean, "
                    f"First, Last, or one of your own)")
        if type(assigner) not in (TumblingWindows, SlidingWindows, SessionWindows):
            return f"{type(assigner).__name__} is not one of TumblingWindows, SlidingWindows, SessionWindows"
        if isinstance(assigner, SlidingWindows) and assigner.slide_ms > assigner.size_ms:
            return "its sliding windows leave gaps (the slide is longer than the size): a row in one belongs to none"
        if type(self.trigger) is not type(assigner.default_trigger()):
            return f"{self.trigger!r} is not the windows' default trigger"
        if assigner.domain is TimeDomain.EVENT_TIME and not isinstance(self.timestamp, str):
            return "timestamp= is a function of the row, not the event-time column's name"
        if not isinstance(self.value, str) and (self.value is not None or function.needs_value):
            return ("value= is a function of the row, not a column name" if self.value is not None else
                    f"{type(function).__name__} needs value=, the column of the element's value")
        if assigner.merging and function.order_sensitive:
            return f"{type(function).__name__} depends on the order of the elements, which sessions merge in"
        return ""

    def open(self, ctx: KeyedContext) -> None:
        self.contents.open(ctx)
        self._trigger_context = TriggerContext(ctx, self._timers(ctx))
        if self.assigner.merging:
            self.sessions: ValueState[tuple[int, ...]] = ctx.get_state(ValueStateDescriptor("window-sessions"))

    def _timers(self, ctx: KeyedContext) -> TimerService:
        return ctx.timer_service(WINDOW_TIMERS, _WINDOWS)

    def _event_time_of(self, row: Any) -> int:
        stamp = self.timestamp
        try:
            return event_time_ms(stamp(row) if callable(stamp) else row[stamp])
        except (KeyError, IndexError, TypeError, ConfigurationError) as exc:  # named here, off the per-row path
            raise self._timestamp_problem(row, exc) from exc

    def _timestamp_problem(self, row: Any, exc: Exception) -> ConfigurationError:
        """What is wrong with ``row``'s event time (``exc`` was raised reading it)."""
        if isinstance(exc, ConfigurationError):
            return ConfigurationError(f"the window operator's row {row!r}: {exc}")
        if callable(self.timestamp):
            return ConfigurationError(f"the window operator's timestamp function failed on row {row!r}: "
                                      f"{type(exc).__name__}: {exc}; return the row's event time (epoch ms or a "
                                      f"datetime)")
        return ConfigurationError(f"the window operator's row {row!r} has no event-time field {self.timestamp!r} "
                                  f"(timestamp={self.timestamp!r}): give every row that field, or pass timestamp= "
                                  f"a function of the row")

    def _cleanup_time(self, window: TimeWindow) -> int:
        """When the window's state goes: its last millisecond plus the allowed lateness, at most the
        largest timestamp (Flink's ``cleanupTime``, which saturates at ``Long.MAX_VALUE``)."""
        return min(window.max_timestamp + self.lateness_ms, MAX_TIMESTAMP)

    def _register_cleanup(self, timers: TimerService, window: TimeWindow) -> None:
        """The timer that clears the window (Flink's cleanup timer): none for a window that never ends."""
        if not self.assigner.ends or self._trigger_timer_cleans_up:
            return
        if self.assigner.domain is TimeDomain.PROCESSING_TIME:
            timers.register_processing_time_timer(window.max_timestamp, window)
        else:
            timers.register_event_time_timer(self._cleanup_time(window), window)

    def _delete_cleanup(self, timers: TimerService, window: TimeWindow) -> None:
        if not self.assigner.ends or self._trigger_timer_cleans_up:
            return
        if self.assigner.domain is TimeDomain.PROCESSING_TIME:
            timers.delete_processing_time_timer(window.max_timestamp, window)
        else:
            timers.delete_event_time_timer(self._cleanup_time(window), window)

    def _is_cleanup(self, timestamp: int, domain: TimeDomain | None, window: TimeWindow) -> bool:
        if not self.assigner.ends or domain is not self.assigner.domain:
            return False
        return timestamp == (window.max_timestamp if domain is TimeDomain.PROCESSING_TIME
                             else self._cleanup_time(window))

    def process(self, row: Any, ctx: KeyedContext) -> Iterator[Any]:
        timers = self._timers(ctx)
        # the row's event time where windows or kept elements need it; windows of processing time,
        # or without timestamp= (global windows), take the processing time
        event_time = self._event_time_of(row) if self._reads_event_time else None
        timestamp = event_time if self._event_time_windows else timers.current_processing_time()
        value = self._value_of(row) if self._value_of is not None else row
        watermark = timers.current_watermark()
        skipped = True  # by every window, as late
        for window in self.assigner.assign_element(row, timestamp):
            if self.assigner.merging:
                # as Flink: merge first, then ask whether the merged session is late, so an element
                # whose own window is past its lateness still joins a live session it touches
                merged = self._merge(window, timers, watermark if self.judges_lateness else None)
                if merged is None:
                    continue  # late beyond the allowed lateness
                window, state_window = merged
            elif self.judges_lateness and self._cleanup_time(window) <= watermark:
                continue  # late beyond the allowed lateness
            else:
                state_window = window
            skipped = False
            self.contents.add(state_window, value, event_time)
            yield from self._element_added(row, timestamp, window, state_window, timers, ctx)
        if skipped and self.judges_lateness and event_time + self.lateness_ms <= watermark:
            ctx.report_late(row)  # Flink's isSkippedElement && isElementLate: dropped, or the side output

    def process_groups(self, groups: GroupedRows, ctx: KeyedContext) -> list[Any]:
        """A batch at once (where ``processes_groups``): its rows are assigned to their windows (or
        the sessions they make) and aggregated per (key, window) with Arrow (``windows.batch``), and
        each accumulator is merged into its window as ``process`` adds a row, the trigger asked
        once per (key, window). A key with a row that a window may find late (one of its windows
        ends at or before the watermark) or near either end of time goes row by row through
        ``process``, in input order, so that lateness, late firings and the side output are
        exactly the per-row operator's; so does a batch whose columns Arrow cannot aggregate.
        Returns the output rows (from keys that went row by row: on time, windows fire by timer)."""
        out: list[Any] = []
        timers = self._timers(ctx)
        key_index = np.repeat(np.arange(groups.num_keys), groups.counts())
        in_plan = np.zeros(groups.num_keys, dtype=bool)
        plan = None
        times = self._batch_times(groups, timers)
        if times is not None:
            in_plan[:] = True
            in_plan[key_index[times[1]]] = False
            rows = np.flatnonzero(in_plan[key_index])
            plan = self._batch_plan(groups, key_index[rows], times[0][rows], rows) if len(rows) else None
            if plan is None:
                in_plan[:] = False
        for i in np.flatnonzero(~in_plan).tolist():
            ctx.set_current_key(groups.keys[i], groups.key_groups[i])
            for row in groups.rows_of(i).to_pylist():
                out.extend(self.process(row, ctx))
        if plan is not None:
            self._apply_batch_plan(plan, groups, timers, ctx, out)
        return out

    def _batch_times(self, groups: GroupedRows, timers: TimerService) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows' times (event or processing time, as ``process`` takes them) and which rows go
        row by row; None when the batch cannot be vectorized (a column missing, or an event time
        that is neither a timestamp nor an integer)."""
        names = groups.rows.schema.names
        if isinstance(self.value, str) and self.value not in names:
            return None
        assigner = self.assigner
        if assigner.domain is TimeDomain.PROCESSING_TIME:
            times, by_row = np.full(groups.num_rows, timers.current_processing_time(), dtype=np.int64), None
        else:
            if self.timestamp not in names:
                return None
            column = groups.column(self.timestamp)
            times = event_times_ms(column)
            if times is None:
                return None
            by_row = column.is_null().to_numpy(zero_copy_only=False)
        reach = 2 * (assigner.gap_ms if assigner.merging else assigner.size_ms + _slide_ms(assigner))
        edge = (times < min(MIN_TIMESTAMP + reach, MAX_TIMESTAMP)) | (times > max(MAX_TIMESTAMP - reach, MIN_TIMESTAMP))
        by_row = edge if by_row is None else by_row | edge
        if self.judges_lateness:
            safe = np.where(by_row, 0, times)
            by_row |= self._first_window_end(safe) - 1 <= timers.current_watermark()
        return times, by_row

    def _first_window_end(self, times: np.ndarray) -> np.ndarray:
        """The end of the earliest window each time belongs to."""
        assigner = self.assigner
        if assigner.merging:
            return times + assigner.gap_ms
        size, slide = assigner.size_ms, _slide_ms(assigner)
        last_start = times - np.mod(times - assigner.offset_ms, slide)
        windows_back = -((times - last_start - size) // slide) - 1  # ceil((last_start - times + size) / slide) - 1
        return last_start - windows_back * slide + size

    def _batch_plan(self, groups: GroupedRows, key_index: np.ndarray, times: np.ndarray,
                    rows: np.ndarray) -> WindowGroups | None:
        """The (key, window) accumulators of ``rows`` (positions in ``groups``, of keys ``key_index``,
        at ``times``): sessions within the batch, or aligned windows. None when Arrow cannot
        aggregate the value column's type (the rows then go row by row, which says what is wrong),
        or not as Python would (an integer sum that could overflow 64 bits)."""
        assigner, function = self.assigner, self.contents.function  # type: ignore[attr-defined]
        column = groups.column(self.value) if isinstance(self.value, str) else None
        try:
            if assigner.merging:
                order, session_of_row, session_keys, bounds = batch_sessions(key_index, times, assigner.gap_ms)
                return WindowGroups(session_keys.tolist(), bounds[:, 0].tolist(), bounds[:, 1].tolist(),
                                    aggregated(function, session_of_row, values_of(column, rows[order])))
            positions, starts = aligned_windows(np.arange(len(rows)), times, assigner.size_ms, _slide_ms(assigner),
                                                assigner.offset_ms)
            return window_groups(function, key_index[positions], starts, assigner.size_ms,
                                 values_of(column, rows[positions]))
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid, NotAggregated):
            return None

    def _apply_batch_plan(self, plan: WindowGroups, groups: GroupedRows, timers: TimerService, ctx: KeyedContext,
                          out: list[Any]) -> None:
        """Merge each (key, window)'s accumulator into its window (a session: after merging it with
        the key's sessions, as ``process`` merges an element's window) and ask the trigger. The
        default triggers, the only ones of this path, read the window alone, not the element."""
        contents, keys, key_groups = self.contents, groups.keys, groups.key_groups
        merging = self.assigner.merging
        watermark = timers.current_watermark() if self.judges_lateness else None
        current = -1
        for k, start, end, accumulator in zip(plan.keys, plan.starts, plan.ends, plan.accumulators):
            if k != current:
                ctx.set_current_key(keys[k], key_groups[k])
                current = k
            window = state_window = TimeWindow(start, end)
            if merging:  # never late: every row of the batch plan ends its windows after the watermark
                window, state_window = self._merge(window, timers, watermark)  # type: ignore[misc]
            contents.add_accumulated(state_window, accumulator)  # type: ignore[attr-defined]
            out.extend(self._element_added(None, window.max_timestamp, window, state_window, timers, ctx))

    def _element_added(self, row: Any, timestamp: int, window: TimeWindow, state_window: TimeWindow,
                       timers: TimerService, ctx: KeyedContext) -> Iterable[Any]:
        """After an element (or the vectorized path's elements of one window) went into ``window``'s
        contents: what the trigger says, and the window's cleanup timer. Returns the output."""
        trigger_context = self._trigger_context
        trigger_context.window = window
        result = self.trigger.on_element(row, timestamp, window, trigger_context)
        fired = list(self.contents.emit(ctx.current_key, window, state_window, ctx)) if result.fire else ()
        if result.purge:
            self.contents.clear(state_window)
        self._register_cleanup(timers, window)
        return fired

    def _merge(self, new: TimeWindow, timers: TimerService,
               watermark: int | None) -> tuple[TimeWindow, TimeWindow] | None:
        """Merge ``new`` with the key's sessions it intersects: (the session, its state window), or
        None when the merged session is late beyond the allowed lateness (then nothing changes). An
        event-time session the ``watermark`` passed by its lateness is over (its cleanup timer fires
        after the epoch's rows): it merges with nothing."""
        kept: list[int] = []
        overlapping: list[tuple[TimeWindow, TimeWindow]] = []
        for session, state_window in _sessions(self.sessions.value()):
            if session.intersects(new) and (watermark is None or self._cleanup_time(session) > watermark):
                overlapping.append((session, state_window))
            else:
                kept += (session.start, session.end, state_window.start, state_window.end)
        overlapping.sort()
        merged = new
        for session, _ in overlapping:
            merged = merged.cover(session)
        if watermark is not None and self._cleanup_time(merged) <= watermark:
            # Flink adds the window, finds the result late and retires it again. Every session
            # merged here ends its lateness after the watermark, and so would the result: a late
            # result is ``new`` alone, and leaving the sessions, state and timers as they are is
            # the same
            return None
        state_window = overlapping[0][1] if overlapping else new
        merged_windows = [session for session, _ in overlapping]
        if merged_windows and merged_windows != [merged]:  # as Flink's MergingWindowSet: not ``new`` inside one session
            context = self._trigger_context
            context.window, context.merged_windows = merged, merged_windows
            try:
                self.trigger.on_merge(merged, context)
            finally:
                context.merged_windows = ()
            for session in merged_windows:
                context.window = session
                self.trigger.clear(session, context)
                self._delete_cleanup(timers, session)
            for _, other in overlapping:
                if other != state_window:
                    self.contents.merge(state_window, other)
        self.sessions.update((*kept, merged.start, merged.end, state_window.start, state_window.end))
        return merged, state_window

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterator[Any]:
        window = ctx.timer.namespace if ctx.timer is not None else None
        if not isinstance(window, TimeWindow):
            return
        state_window = window
        sessions: dict[TimeWindow, TimeWindow] | None = None
        if self.assigner.merging:
            sessions = dict(_sessions(self.sessions.value()))
            if window not in sessions:
                return  # merged into a larger session since
            state_window = sessions[window]
        context = self._trigger_context
        context.window = window
        result = (self.trigger.on_event_time(timestamp, window, context) if ctx.time_domain is TimeDomain.EVENT_TIME
                  else self.trigger.on_processing_time(timestamp, window, context))
        if result.fire:
            yield from self.contents.emit(ctx.current_key, window, state_window, ctx)
        if result.purge:
            self.contents.clear(state_window)
        if self._is_cleanup(timestamp, ctx.time_domain, window):
            self.contents.clear(state_window)
            context.window = window
            self.trigger.clear(window, context)
            if sessions is not None:
                del sessions[window]
                self.sessions.update(tuple(n for pair in sessions.items() for w in pair for n in (w.start, w.end))
                                     or None)


def _slide_ms(assigner: WindowAssigner) -> int:
    """How far apart aligned windows start: the slide of sliding windows, the size of tumbling ones."""
    return assigner.slide_ms if isinstance(assigner, SlidingWindows) else assigner.size_ms  # type: ignore[attr-defined]


def _sessions(packed: tuple[int, ...] | None) -> Iterator[tuple[TimeWindow, TimeWindow]]:
    """The (session, state window) pairs of a key, kept as one flat tuple of integers (start, end,
    state start, state end, ...): a backend copies or serializes it far faster than windows."""
    packed = packed or ()
    for i in range(0, len(packed), 4):
        yield TimeWindow(packed[i], packed[i + 1]), TimeWindow(packed[i + 2], packed[i + 3])


def aggregate(assigner: WindowAssigner, function: AggregateFunction, *, timestamp: str | Callable[[Any], Any] | None = None,
              value: str | Callable[[Any], Any] | None = None,
              emit: Callable[[Any, TimeWindow, Any], Any] = default_emit,
              allowed_lateness: Any = "0 ms", accumulator_serializer: TypeSerializer | None = None,
              trigger: Trigger | None = None, vectorized: bool | None = None) -> WindowOperator:
    """Windows that keep one accumulator each (Flink's ``window(...).aggregate(...)``): each element's
    value (``value``: a column of the row, or a function of it; default: the row) is added; when a
    window fires, ``emit(key, window, result)``
    gives its output row (default ``(key..., start, end, result)``). ``timestamp``: the row's
    event-time column or a function of the row (event-time windows). ``allowed_lateness``: how
    long after its end a window still takes rows (each one fires it again); a row is late when
    every window it belongs to is past that, and is then dropped or, with the job's
    ``late_rows="side_output"``, returned in the side output.
    ``trigger`` (``windows.triggers``): when windows fire and purge; by default at their end.

    ``vectorized``: with a ``VectorizedAggregate`` (the ready-made ones), the default trigger,
    tumbling, sliding or session windows, and ``timestamp``/``value`` given as column names, whole
    batches are assigned to windows and aggregated with Arrow: the same results and timers
    (docs: "Vectorized windows" says where Arrow's arithmetic differs), with Python work per
    (key, window) instead of per row (``WindowOperator.process_groups``).
    None (the default): where it can; False: row by row; True: refused where it cannot, saying why."""
    if not isinstance(function, AggregateFunction):
        raise ConfigurationError(f"windows.aggregate needs an AggregateFunction instance, got {function!r}")
    return WindowOperator(assigner, _Accumulated(function, emit, accumulator_serializer), timestamp, value,
                          allowed_lateness, trigger, vectorized)


def process(assigner: WindowAssigner, function: ProcessWindowFunction, *,
            timestamp: str | Callable[[Any], Any] | None = None, value: str | Callable[[Any], Any] | None = None,
            allowed_lateness: Any = "0 ms", element_serializer: TypeSerializer | None = None,
            trigger: Trigger | None = None, evictor: Evictor | None = None) -> WindowOperator:
    """Windows that keep every element (``value(row)``, default the row) and hand them to
    ``function.process(key, window, elements, ctx)`` when the window fires (``trigger``);
    ``evictor`` (``windows.evictors``) removes elements then, before the function runs or after."""
    if not isinstance(function, ProcessWindowFunction):
        raise ConfigurationError(f"windows.process needs a ProcessWindowFunction instance, got {function!r}")
    if evictor is not None and not isinstance(evictor, Evictor):
        raise ConfigurationError(f"evictor= needs an Evictor (e.g. windows.CountEvictor.of(100)), got {evictor!r}")
    contents = (_Collected(function, element_serializer) if evictor is None
                else _Evicting(function, element_serializer, evictor))
    return WindowOperator(assigner, contents, timestamp, value, allowed_lateness, trigger)
