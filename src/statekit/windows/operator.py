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
from typing import Any, Callable, Iterable, Iterator

from statekit.runtime.event_time import event_time_ms
from statekit.runtime.function import KeyedContext, KeyedProcessFunction
from statekit.runtime.timers import TimerService
from statekit.spi.descriptors import AggregateFunction, ListStateDescriptor, ValueStateDescriptor
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import ListState, ValueState
from statekit.spi.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeDomain
from statekit.windows.assigners import WindowAssigner, window_duration_ms
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
        self._function, self._emit, self._serializer = function, emit, serializer

    def open(self, ctx: KeyedContext) -> None:
        self._state = ctx.get_state(ValueStateDescriptor("window-accumulator", self._serializer), _WINDOWS)

    def _at(self, window: TimeWindow) -> Any:
        self._state.set_current_namespace(window)
        return self._state.value()

    def add(self, window: TimeWindow, value: Any, timestamp: int | None = None) -> None:
        accumulator = self._at(window)
        if accumulator is None:
            accumulator = self._function.create_accumulator()
        self._state.update(self._function.add(value, accumulator))

    def emit(self, key: Any, window: TimeWindow, state_window: TimeWindow, ctx: KeyedContext) -> Iterable[Any]:
        accumulator = self._at(state_window)
        if accumulator is None:
            return ()
        if self._emit is default_emit:  # in the type of the job's event time (a Spark timestamp column's)
            return (default_emit(key, window, self._function.get_result(accumulator), ctx.time.event_time_type),)
        return (self._emit(key, window, self._function.get_result(accumulator)),)

    def merge(self, target: TimeWindow, source: TimeWindow) -> None:
        moved = self._at(source)
        if moved is None:
            return
        self._state.clear()
        kept = self._at(target)
        self._state.update(moved if kept is None else self._function.merge(kept, moved))

    def clear(self, window: TimeWindow) -> None:
        self._state.set_current_namespace(window)
        self._state.clear()


class _Collected(_Contents):
    def __init__(self, function: ProcessWindowFunction, serializer: TypeSerializer | None) -> None:
        self._function, self._serializer = function, serializer

    def open(self, ctx: KeyedContext) -> None:
        self._state = ctx.get_state(ListStateDescriptor("window-elements", self._serializer), _WINDOWS)

    def add(self, window: TimeWindow, value: Any, timestamp: int | None = None) -> None:
        self._state.set_current_namespace(window)
        self._state.add(value)

    def emit(self, key: Any, window: TimeWindow, state_window: TimeWindow, ctx: KeyedContext) -> Iterable[Any]:
        self._state.set_current_namespace(state_window)
        elements = self._state.get()
        return (self._function.process(key, window, elements, ctx) or ()) if elements else ()

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
        output = list(self._function.process(key, window, [e.value for e in kept], ctx) or ()) if kept else []
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
                 value: Callable[[Any], Any] | None, allowed_lateness: Any, trigger: Trigger | None = None) -> None:
        if not isinstance(assigner, WindowAssigner):
            raise ConfigurationError(f"a window operator needs a WindowAssigner (e.g. TumblingWindows.of('1 hour')), "
                                     f"got {assigner!r}")
        event_time = assigner.domain is TimeDomain.EVENT_TIME
        if event_time and assigner.ends and timestamp is None:
            raise ConfigurationError("event-time windows need timestamp=: the element's event-time column (the "
                                     "job's event_time) or a function of the row")
        self.assigner = assigner
        self.contents = contents
        self.timestamp = timestamp
        self.value = value
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
        value = self.value(row) if self.value is not None else row
        watermark = timers.current_watermark()
        trigger, trigger_context = self.trigger, self._trigger_context
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
            trigger_context.window = window
            result = trigger.on_element(row, timestamp, window, trigger_context)
            if result.fire:
                yield from self.contents.emit(ctx.current_key, window, state_window, ctx)
            if result.purge:
                self.contents.clear(state_window)
            self._register_cleanup(timers, window)
        if skipped and self.judges_lateness and event_time + self.lateness_ms <= watermark:
            ctx.report_late(row)  # Flink's isSkippedElement && isElementLate: dropped, or the side output

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


def _sessions(packed: tuple[int, ...] | None) -> Iterator[tuple[TimeWindow, TimeWindow]]:
    """The (session, state window) pairs of a key, kept as one flat tuple of integers (start, end,
    state start, state end, ...): a backend copies or serializes it far faster than windows."""
    packed = packed or ()
    for i in range(0, len(packed), 4):
        yield TimeWindow(packed[i], packed[i + 1]), TimeWindow(packed[i + 2], packed[i + 3])


def aggregate(assigner: WindowAssigner, function: AggregateFunction, *, timestamp: str | Callable[[Any], Any] | None = None,
              value: Callable[[Any], Any] | None = None, emit: Callable[[Any, TimeWindow, Any], Any] = default_emit,
              allowed_lateness: Any = "0 ms", accumulator_serializer: TypeSerializer | None = None,
              trigger: Trigger | None = None) -> WindowOperator:
    """Windows that keep one accumulator each (Flink's ``window(...).aggregate(...)``): each element's
    ``value(row)`` (default: the row) is added; when a window fires, ``emit(key, window, result)``
    gives its output row (default ``(key..., start, end, result)``). ``timestamp``: the row's
    event-time column or a function of the row (event-time windows). ``allowed_lateness``: how
    long after its end a window still takes rows (each one fires it again); a row is late when
    every window it belongs to is past that, and is then dropped or, with the job's
    ``late_rows="side_output"``, returned in the side output.
    ``trigger`` (``windows.triggers``): when windows fire and purge; by default at their end."""
    if not isinstance(function, AggregateFunction):
        raise ConfigurationError(f"windows.aggregate needs an AggregateFunction instance, got {function!r}")
    return WindowOperator(assigner, _Accumulated(function, emit, accumulator_serializer), timestamp, value,
                          allowed_lateness, trigger)


def process(assigner: WindowAssigner, function: ProcessWindowFunction, *,
            timestamp: str | Callable[[Any], Any] | None = None, value: Callable[[Any], Any] | None = None,
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
