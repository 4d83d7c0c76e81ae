"""Window assigners (Flink's ``WindowAssigner``): which windows an element belongs to, and in
which time domain they close. Sizes are durations (``"1 hour"``, a ``timedelta``).

Timestamps are 64-bit epoch milliseconds: a size, slide, gap or offset beyond the largest one is
refused, and a window that would reach past either end of that range stops at it (an element near
the largest timestamp gets ``[start, MAX_TIMESTAMP)``), so its timers can always be kept."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from statekit.runtime.event_time import duration_ms
from statekit.spi.errors import ConfigurationError
from statekit.spi.timers import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeDomain
from statekit.windows.time_window import TimeWindow


class WindowAssigner(ABC):
    #: when the windows close: the watermark (event time) or the epoch's processing time
    domain: TimeDomain = TimeDomain.EVENT_TIME
    #: session windows merge when they intersect
    merging: bool = False
    #: the windows end, and are cleared then (plus the allowed lateness); global windows never do
    ends: bool = True

    def default_trigger(self) -> Any:
        """The trigger of windows that are given none: fire at the window's end, in the assigner's domain."""
        from statekit.windows.triggers import EventTimeTrigger, ProcessingTimeTrigger  # noqa: PLC0415 - a cycle

        return EventTimeTrigger() if self.domain is TimeDomain.EVENT_TIME else ProcessingTimeTrigger()

    @abstractmethod
    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The windows an element with ``timestamp`` (epoch ms) belongs to."""

    def assign_element(self, element: Any, timestamp: int) -> list[TimeWindow]:
        """The windows of ``element`` (the row, as the window operator gets it) with ``timestamp``:
        what the operator asks. ``assign(timestamp)`` unless the assigner looks at the element too
        (Flink's ``assignWindows(element, timestamp, ...)``; ``DynamicSessionWindows``): override
        this to assign by the row, e.g. a point window ``[t, t)`` for some elements."""
        return self.assign(timestamp)


def checked_ms(owner: str, setting: str, ms: int, given: Any = None, positive: bool = True) -> int:
    """``ms`` if it is a duration windows can use: positive (or, with ``positive=False``, not
    negative) and at most the largest timestamp; else a ``ConfigurationError`` naming ``owner``,
    the ``setting``, the value (as ``given``, and in milliseconds) and the limit."""
    shown = f"{given!r} ({ms} ms)" if given is not None else f"{ms} ms"
    if ms <= 0 if positive else ms < 0:
        raise ConfigurationError(f"{owner}: {setting} must be a {'positive' if positive else 'non-negative'} "
                                 f"duration, got {shown}")
    if ms > MAX_TIMESTAMP:
        raise ConfigurationError(f"{owner}: {setting} must be at most the largest timestamp, {MAX_TIMESTAMP} ms "
                                 f"(about 292 million years), got {shown}: its windows could not be represented")
    return ms


def window_duration_ms(owner: str, setting: str, value: Any, positive: bool = True) -> int:
    """A duration setting of ``owner`` (``"1 hour"``, a ``timedelta``) as milliseconds, checked by ``checked_ms``."""
    return checked_ms(owner, setting, duration_ms(value, setting), value, positive)


def offset_ms(owner: str, value: Any) -> int:
    """A window offset (``"15 minutes"``, ``"-15 minutes"``, a ``timedelta``) as milliseconds: negative
    offsets are allowed, as in Flink; ``checked_offset`` bounds it by the window's period."""
    ms = duration_ms(value, "the window offset", signed=True)
    checked_ms(owner, "the window offset", abs(ms), value, positive=False)
    return ms


def checked_offset(owner: str, offset: int, period_setting: str, period: int) -> None:
    """Flink's rule: the offset is shorter than the period its windows repeat at (the size of
    tumbling windows, the slide of sliding ones), either way: ``abs(offset) < period``."""
    checked_ms(owner, "the window offset", abs(offset), positive=False)
    if abs(offset) >= period:
        raise ConfigurationError(f"{owner}: the window offset must be shorter than {period_setting} ({period} ms) "
                                 f"either way, -{period} < offset < {period} (as Flink requires), got {offset} ms; "
                                 f"an offset of a whole {period_setting} gives the same windows as none")


def _window(start: int, size: int) -> TimeWindow:
    """``[start, start + size)``, stopped at the ends of the 64-bit timestamps."""
    return TimeWindow(max(start, MIN_TIMESTAMP), min(start + size, MAX_TIMESTAMP))


@dataclass(frozen=True)
class TumblingWindows(WindowAssigner):
    """Windows of ``size`` one after the other, aligned to the epoch plus ``offset`` (negative too,
    shorter than ``size`` either way, as in Flink: ``"-8 hours"`` gives days of UTC+8)."""

    size_ms: int
    offset_ms: int = 0
    domain: TimeDomain = TimeDomain.EVENT_TIME

    @classmethod
    def of(cls, size: Any, offset: Any = "0 ms", domain: TimeDomain = TimeDomain.EVENT_TIME) -> "TumblingWindows":
        return cls(window_duration_ms(cls.__name__, "the window size", size), offset_ms(cls.__name__, offset), domain)

    def __post_init__(self) -> None:
        checked_ms(type(self).__name__, "the window size", self.size_ms)
        checked_offset(type(self).__name__, self.offset_ms, "the window size", self.size_ms)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        return [_window(timestamp - (timestamp - self.offset_ms) % self.size_ms, self.size_ms)]


@dataclass(frozen=True)
class SlidingWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide`` (aligned to the epoch plus ``offset``, shorter than
    ``slide`` either way): an element is in ``size / slide`` of them."""

    size_ms: int
    slide_ms: int
    offset_ms: int = 0
    domain: TimeDomain = TimeDomain.EVENT_TIME

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = "0 ms",
           domain: TimeDomain = TimeDomain.EVENT_TIME) -> "SlidingWindows":
        return cls(window_duration_ms(cls.__name__, "the window size", size),
                   window_duration_ms(cls.__name__, "the window slide", slide), offset_ms(cls.__name__, offset), domain)

    def __post_init__(self) -> None:
        checked_ms(type(self).__name__, "the window size", self.size_ms)
        checked_ms(type(self).__name__, "the window slide", self.slide_ms)
        checked_offset(type(self).__name__, self.offset_ms, "the window slide", self.slide_ms)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        last_start = timestamp - (timestamp - self.offset_ms) % self.slide_ms
        return [_window(start, self.size_ms) for start in range(last_start, timestamp - self.size_ms, -self.slide_ms)]


@dataclass(frozen=True)
class SessionWindows(WindowAssigner):
    """A window per burst of activity: an element opens ``[t, t + gap)``, and windows that
    intersect merge, so a session closes after ``gap`` without elements."""

    gap_ms: int
    domain: TimeDomain = TimeDomain.EVENT_TIME
    merging: bool = True

    @classmethod
    def with_gap(cls, gap: Any, domain: TimeDomain = TimeDomain.EVENT_TIME) -> "SessionWindows":
        return cls(window_duration_ms(cls.__name__, "the session gap", gap), domain)

    def __post_init__(self) -> None:
        checked_ms(type(self).__name__, "the session gap", self.gap_ms)

    @staticmethod
    def with_dynamic_gap(gap_of: Callable[[Any], Any],
                         domain: TimeDomain = TimeDomain.EVENT_TIME) -> "DynamicSessionWindows":
        """Sessions whose gap each element gives (Flink's ``withDynamicGap``): ``gap_of(row)`` is a
        duration (``"5 minutes"``, a ``timedelta``, or an int of milliseconds); an element opens
        ``[t, t + its gap)`` and windows that intersect merge."""
        if not callable(gap_of):
            raise ConfigurationError(f"SessionWindows.with_dynamic_gap needs a function of the row that gives its "
                                     f"session gap, got {gap_of!r}")
        return DynamicSessionWindows(gap_of, domain)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        return [_window(timestamp, self.gap_ms)]


@dataclass(frozen=True)
class DynamicSessionWindows(WindowAssigner):
    """Session windows whose gap each element gives (``SessionWindows.with_dynamic_gap``)."""

    gap_of: Callable[[Any], Any]
    domain: TimeDomain = TimeDomain.EVENT_TIME
    merging: bool = True

    def assign(self, timestamp: int) -> list[TimeWindow]:
        raise ConfigurationError("DynamicSessionWindows assigns by the element's gap: call assign_element(row, "
                                 "timestamp)")

    def assign_element(self, element: Any, timestamp: int) -> list[TimeWindow]:
        try:
            gap = self.gap_of(element)
        except Exception as exc:
            raise ConfigurationError(f"the session gap function failed on {element!r}: {type(exc).__name__}: "
                                     f"{exc}") from exc
        try:
            if gap.__class__ is int:
                return [_window(timestamp, checked_ms(_DYNAMIC, "the gap", gap))]
            return [_window(timestamp, _text_gap_ms(gap) if gap.__class__ is str
                            else window_duration_ms(_DYNAMIC, "the gap", gap))]
        except ConfigurationError as exc:
            raise ConfigurationError(f"{exc}, for {element!r} (the gap function returns a duration: '5 minutes', "
                                     f"a timedelta, or an int of milliseconds)") from None


_DYNAMIC = "SessionWindows.with_dynamic_gap"


@lru_cache(maxsize=256)
def _text_gap_ms(gap: str) -> int:
    """A gap given as text, parsed once: a gap function returns the same few texts for every row."""
    return window_duration_ms(_DYNAMIC, "the gap", gap)


#: the one window of ``GlobalWindows``: all of time
GLOBAL_WINDOW = TimeWindow(MIN_TIMESTAMP, MAX_TIMESTAMP)


@dataclass(frozen=True)
class GlobalWindows(WindowAssigner):
    """One window per key for all of time (``GLOBAL_WINDOW``), which never ends: it fires only as
    its trigger says (the default, ``NeverTrigger``, never does: give one, e.g. ``CountTrigger``),
    and its contents stay until a trigger purges them. An element's timestamp (the operator's
    ``timestamp=``, else the processing time) is what its trigger sees."""

    domain: TimeDomain = TimeDomain.EVENT_TIME
    ends: bool = False

    @classmethod
    def create(cls) -> "GlobalWindows":
        return cls()

    def assign(self, timestamp: int) -> list[TimeWindow]:
        return [GLOBAL_WINDOW]

    def default_trigger(self) -> Any:
        from statekit.windows.triggers import NeverTrigger  # noqa: PLC0415 - a cycle

        return NeverTrigger()
