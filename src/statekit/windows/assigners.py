"""Window assigners (Flink's ``WindowAssigner``): which windows an element belongs to, and in
which time domain they close. Sizes are durations (``"1 hour"``, a ``timedelta``)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from statekit.runtime.event_time import duration_ms
from statekit.spi.errors import ConfigurationError
from statekit.spi.timers import TimeDomain
from statekit.windows.time_window import TimeWindow


class WindowAssigner(ABC):
    #: when the windows close: the watermark (event time) or the epoch's processing time
    domain: TimeDomain = TimeDomain.EVENT_TIME
    #: session windows merge when they intersect
    merging: bool = False

    @abstractmethod
    def assign(self, timestamp: int) -> list[TimeWindow]:
        """The windows an element with ``timestamp`` (epoch ms) belongs to."""


def _positive(value: Any, setting: str) -> int:
    ms = duration_ms(value, setting)
    if ms <= 0:
        raise ConfigurationError(f"{setting} must be a positive duration, got {value!r}")
    return ms


@dataclass(frozen=True)
class TumblingWindows(WindowAssigner):
    """Windows of ``size`` one after the other, aligned to the epoch (plus ``offset``)."""

    size_ms: int
    offset_ms: int = 0
    domain: TimeDomain = TimeDomain.EVENT_TIME

    @classmethod
    def of(cls, size: Any, offset: Any = "0 ms", domain: TimeDomain = TimeDomain.EVENT_TIME) -> "TumblingWindows":
        return cls(_positive(size, "the window size"), duration_ms(offset, "the window offset"), domain)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        start = timestamp - (timestamp - self.offset_ms) % self.size_ms
        return [TimeWindow(start, start + self.size_ms)]


@dataclass(frozen=True)
class SlidingWindows(WindowAssigner):
    """Windows of ``size`` starting every ``slide``: an element is in ``size / slide`` of them."""

    size_ms: int
    slide_ms: int
    offset_ms: int = 0
    domain: TimeDomain = TimeDomain.EVENT_TIME

    @classmethod
    def of(cls, size: Any, slide: Any, offset: Any = "0 ms",
           domain: TimeDomain = TimeDomain.EVENT_TIME) -> "SlidingWindows":
        return cls(_positive(size, "the window size"), _positive(slide, "the window slide"),
                   duration_ms(offset, "the window offset"), domain)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        last_start = timestamp - (timestamp - self.offset_ms) % self.slide_ms
        return [TimeWindow(start, start + self.size_ms)
                for start in range(last_start, timestamp - self.size_ms, -self.slide_ms)]


@dataclass(frozen=True)
class SessionWindows(WindowAssigner):
    """A window per burst of activity: an element opens ``[t, t + gap)``, and windows that
    intersect merge, so a session closes after ``gap`` without elements."""

    gap_ms: int
    domain: TimeDomain = TimeDomain.EVENT_TIME
    merging: bool = True

    @classmethod
    def with_gap(cls, gap: Any, domain: TimeDomain = TimeDomain.EVENT_TIME) -> "SessionWindows":
        return cls(_positive(gap, "the session gap"), domain)

    def assign(self, timestamp: int) -> list[TimeWindow]:
        return [TimeWindow(timestamp, timestamp + self.gap_ms)]
