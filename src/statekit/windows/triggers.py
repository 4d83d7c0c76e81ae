"""Triggers (Flink's ``Trigger``): when a window emits its contents, and when it purges them.

The window operator asks its trigger on each element of a window, and on each timer of the
window the trigger registered; the answer (``TriggerResult``) fires the window (its function
runs on the contents, which stay), purges it (the contents go), both, or neither. A trigger
keeps what it needs as keyed state in the window's namespace (``TriggerContext.get_state``), so
it is checkpointed, rescaled and carried through backend switches like any state; its timers are
the window operator's, in the window's namespace.

Independently of the trigger, the operator clears a window when its cleanup time comes (the
window's end plus the allowed lateness, in event time; its end, in processing time; never for
global windows).

The triggers here are Flink's (a trigger's timer callbacks default to ``CONTINUE``): ``EventTimeTrigger`` (the default of event-time windows),
``ProcessingTimeTrigger`` (of processing-time windows), ``CountTrigger``,
``ContinuousEventTimeTrigger``, ``ContinuousProcessingTimeTrigger``, ``PurgingTrigger`` and
``NeverTrigger`` (the default of global windows).
"""
from __future__ import annotations

import dataclasses
import enum
from abc import ABC, abstractmethod
from typing import Any, Sequence

from statekit.runtime.function import KeyedContext
from statekit.runtime.timers import TimerService
from statekit.serializers import Int64Serializer
from statekit.spi.descriptors import ReducingStateDescriptor, StateDescriptor
from statekit.spi.errors import ConfigurationError
from statekit.spi.state import ListState, ReducingState, State
from statekit.windows.assigners import window_duration_ms
from statekit.windows.time_window import TimeWindow, TimeWindowSerializer

#: a trigger's state is named ``TRIGGER_STATE_PREFIX + <its descriptor's name>``
TRIGGER_STATE_PREFIX = "window-trigger-"
_WINDOWS = TimeWindowSerializer()


class TriggerResult(enum.Enum):
    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    @property
    def fire(self) -> bool:
        return self.value[0]

    @property
    def purge(self) -> bool:
        return self.value[1]


class TriggerContext:
    """What a trigger may do for the window it is asked about (``window``): read the times,
    register and delete timers of the window, and keep state in the window's namespace."""

    def __init__(self, ctx: KeyedContext, timers: TimerService) -> None:
        self._ctx = ctx
        self._timers = timers
        #: the window the trigger is asked about
        self.window: TimeWindow = TimeWindow(0, 0)
        #: while ``on_merge`` runs: the windows merged into ``window``
        self.merged_windows: Sequence[TimeWindow] = ()

    def current_watermark(self) -> int:
        return self._timers.current_watermark()

    def current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def register_event_time_timer(self, timestamp: int) -> None:
        self._timers.register_event_time_timer(timestamp, self.window)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._timers.register_processing_time_timer(timestamp, self.window)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._timers.delete_event_time_timer(timestamp, self.window)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._timers.delete_processing_time_timer(timestamp, self.window)

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The state of ``descriptor`` in the window's namespace (stored as
        ``TRIGGER_STATE_PREFIX + descriptor.name``)."""
        state = self._ctx.get_state(_trigger_descriptor(descriptor), _WINDOWS)
        state.set_current_namespace(self.window)
        return state

    def merge_state(self, descriptor: StateDescriptor) -> None:
        """In ``on_merge``: move the state of ``descriptor`` of every merged window into ``window``'s
        (Flink's ``mergePartitionedState``): a reducing state's values are reduced, a list state's
        elements appended."""
        state: State = self._ctx.get_state(_trigger_descriptor(descriptor), _WINDOWS)
        if not isinstance(state, (ReducingState, ListState)):
            raise ConfigurationError(f"TriggerContext.merge_state({descriptor.name!r}): only reducing and list "
                                     f"state merge; keep a merging trigger's state in one of them")
        for merged in self.merged_windows:
            if merged == self.window:
                continue
            state.set_current_namespace(merged)
            moved = state.get()
            state.clear()
            if moved is None or moved == []:
                continue
            state.set_current_namespace(self.window)
            if isinstance(state, ReducingState):
                state.add(moved)
            else:
                state.add_all(moved)
        state.set_current_namespace(self.window)


def _trigger_descriptor(descriptor: StateDescriptor) -> StateDescriptor:
    if not isinstance(descriptor, StateDescriptor):
        raise ConfigurationError(f"a trigger's state needs a state descriptor, got {descriptor!r}")
    return dataclasses.replace(descriptor, name=TRIGGER_STATE_PREFIX + descriptor.name)


class Trigger(ABC):
    """When a window fires and purges. Implement ``on_element``, ``on_event_time`` and
    ``on_processing_time``; ``clear`` removes what the trigger keeps for a window (its state and
    timers) when the window goes; a trigger of merging windows (sessions) implements ``can_merge``
    and ``on_merge``."""

    #: it reads the elements' event times (``on_element``'s ``timestamp``): the window operator
    #: then needs ``timestamp=`` even where its windows would not
    needs_timestamps: bool = False

    @abstractmethod
    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        """An element (the row) with ``timestamp`` was added to ``window``."""

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        """An event-time timer of ``window`` fired at ``time`` (a trigger that registers none: continue)."""
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        """A processing-time timer of ``window`` fired at ``time`` (a trigger that registers none: continue)."""
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        """Whether the trigger works with merging windows (sessions): then it implements ``on_merge``."""
        return False

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        """Windows (``ctx.merged_windows``) merged into ``window``: merge their state
        (``ctx.merge_state``) and register the merged window's timers."""
        raise ConfigurationError(f"{type(self).__name__} does not merge windows (its can_merge() is false)")

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        """``window`` goes (or merged into another): remove its state and timers."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (the default of event-time windows); an
    element added to a window the watermark passed (within the allowed lateness) fires it at once."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        if window.max_timestamp <= ctx.current_watermark():
            # fire now, and not again when the epoch's timers fire (its end timer may still be due)
            ctx.delete_event_time_timer(window.max_timestamp)
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        if window.max_timestamp > ctx.current_watermark():
            ctx.register_event_time_timer(window.max_timestamp)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp)


class ProcessingTimeTrigger(Trigger):
    """Fires once processing time passes the window's end (the default of processing-time windows)."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        if window.max_timestamp > ctx.current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp)


class NeverTrigger(Trigger):
    """Never fires (the default of global windows, which need a trigger of their own)."""

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        return None


def _add(a: int, b: int) -> int:
    return a + b


def _earliest(a: int, b: int) -> int:
    return min(a, b)


class CountTrigger(Trigger):
    """Fires each time the window got ``count`` more elements (its count then starts again)."""

    _COUNT = ReducingStateDescriptor("count", _add, Int64Serializer())

    def __init__(self, count: int) -> None:
        if count.__class__ is not int or count < 1:
            raise ConfigurationError(f"CountTrigger.of needs a positive int count, got {count!r}")
        self.count = count

    @classmethod
    def of(cls, count: int) -> "CountTrigger":
        return cls(count)

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        counted: ReducingState[int] = ctx.get_state(self._COUNT)
        counted.add(1)
        if counted.get() >= self.count:
            counted.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.merge_state(self._COUNT)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.get_state(self._COUNT).clear()

    def __repr__(self) -> str:
        return f"CountTrigger.of({self.count})"


class _Continuous(Trigger):
    """Fires every ``interval`` (aligned to the epoch of timestamps) and at the window's end, in
    the domain of its ``_register`` and ``_delete``."""

    _FIRE_TIME = ReducingStateDescriptor("fire-time", _earliest, Int64Serializer())

    def __init__(self, interval: Any) -> None:
        self.interval_ms = window_duration_ms(type(self).__name__, "the interval", interval)

    @classmethod
    def of(cls, interval: Any) -> "_Continuous":
        """Fire every ``interval`` (``"1 minute"``, a ``timedelta``)."""
        return cls(interval)

    @staticmethod
    def _register(ctx: TriggerContext, time: int) -> None:
        raise NotImplementedError

    @staticmethod
    def _delete(ctx: TriggerContext, time: int) -> None:
        raise NotImplementedError

    def _next_fire(self, time: int, window: TimeWindow, ctx: TriggerContext) -> None:
        next_time = min(time + self.interval_ms, window.max_timestamp)
        ctx.get_state(self._FIRE_TIME).add(next_time)
        self._register(ctx, next_time)

    def _first_fire(self, time: int, window: TimeWindow, ctx: TriggerContext) -> None:
        """The first firing of a window given an element at ``time``, unless one is registered."""
        if ctx.get_state(self._FIRE_TIME).get() is None:
            self._next_fire(time - time % self.interval_ms, window, ctx)

    def _on_timer(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        fire_time: ReducingState[int] = ctx.get_state(self._FIRE_TIME)
        if fire_time.get() == time:
            fire_time.clear()
            self._next_fire(time, window, ctx)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        ctx.merge_state(self._FIRE_TIME)
        next_time = ctx.get_state(self._FIRE_TIME).get()
        if next_time is not None:
            self._register(ctx, next_time)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        fire_time: ReducingState[int] = ctx.get_state(self._FIRE_TIME)
        if fire_time.get() is not None:
            self._delete(ctx, fire_time.get())
        fire_time.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.of('{self.interval_ms} ms')"


class ContinuousEventTimeTrigger(_Continuous):
    """Fires every ``interval`` of event time, as the watermark passes each multiple of it in the
    window, and once the watermark passes the window's end (early firings, then the final one)."""

    needs_timestamps = True

    @staticmethod
    def _register(ctx: TriggerContext, time: int) -> None:
        ctx.register_event_time_timer(time)

    @staticmethod
    def _delete(ctx: TriggerContext, time: int) -> None:
        ctx.delete_event_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        if window.max_timestamp <= ctx.current_watermark():
            ctx.delete_event_time_timer(window.max_timestamp)  # fire now, not again at the epoch's end
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp)
        self._first_fire(timestamp, window, ctx)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        if time == window.max_timestamp:
            return TriggerResult.FIRE
        return self._on_timer(time, window, ctx)


class ContinuousProcessingTimeTrigger(_Continuous):
    """Fires every ``interval`` of processing time while the window has elements."""

    @staticmethod
    def _register(ctx: TriggerContext, time: int) -> None:
        ctx.register_processing_time_timer(time)

    @staticmethod
    def _delete(ctx: TriggerContext, time: int) -> None:
        ctx.delete_processing_time_timer(time)

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        self._first_fire(ctx.current_processing_time(), window, ctx)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return self._on_timer(time, window, ctx)


class PurgingTrigger(Trigger):
    """``trigger``, with every firing also purging the window (``FIRE`` becomes ``FIRE_AND_PURGE``)."""

    def __init__(self, trigger: Trigger) -> None:
        if not isinstance(trigger, Trigger):
            raise ConfigurationError(f"PurgingTrigger.of needs a Trigger, got {trigger!r}")
        self.trigger = trigger

    @classmethod
    def of(cls, trigger: Trigger) -> "PurgingTrigger":
        return cls(trigger)

    @property
    def needs_timestamps(self) -> bool:  # type: ignore[override]
        return self.trigger.needs_timestamps

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.fire else result

    def on_element(self, element: Any, timestamp: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: TimeWindow, ctx: TriggerContext) -> TriggerResult:
        return self._purging(self.trigger.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.trigger.can_merge()

    def on_merge(self, window: TimeWindow, ctx: TriggerContext) -> None:
        self.trigger.on_merge(window, ctx)

    def clear(self, window: TimeWindow, ctx: TriggerContext) -> None:
        self.trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger.of({self.trigger!r})"

