"""Evictors (Flink's ``Evictor``): which elements of a process window are removed when it fires,
before its function runs, after it, or both. The window keeps the elements that remain.

``CountEvictor`` keeps the last ``n`` elements, ``TimeEvictor`` the elements within a span of the
latest element's time, ``DeltaEvictor`` those whose distance to the last element is under a
threshold; an ``Evictor`` of one's own implements ``evict_before`` and ``evict_after``.
"""
from __future__ import annotations

from abc import ABC
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from statekit.runtime.function import KeyedContext
from statekit.spi.errors import ConfigurationError
from statekit.windows.assigners import window_duration_ms
from statekit.windows.time_window import TimeWindow


@dataclass(frozen=True)
class TimestampedValue:
    """An element of a window (its value, as ``value=`` made it) and its event time in epoch
    milliseconds (None where the window operator reads no event time)."""

    timestamp: int | None
    value: Any


class Evictor(ABC):
    """Removes elements of a window when it fires: ``evict_before`` gets the elements (oldest
    first) before the window function runs and returns those to keep (the function sees them),
    ``evict_after`` the same after it ran. Both keep every element unless overridden."""

    def evict_before(self, elements: Sequence[TimestampedValue], window: TimeWindow,
                     ctx: KeyedContext) -> Sequence[TimestampedValue]:
        return elements

    def evict_after(self, elements: Sequence[TimestampedValue], window: TimeWindow,
                    ctx: KeyedContext) -> Sequence[TimestampedValue]:
        return elements


class _BeforeOrAfter(Evictor):
    """An evictor that evicts before the function runs, or (``after=True``) after it."""

    def __init__(self, after: bool) -> None:
        self.after = after

    def _evict(self, elements: Sequence[TimestampedValue]) -> Sequence[TimestampedValue]:
        raise NotImplementedError

    def evict_before(self, elements: Sequence[TimestampedValue], window: TimeWindow,
                     ctx: KeyedContext) -> Sequence[TimestampedValue]:
        return elements if self.after else self._evict(elements)

    def evict_after(self, elements: Sequence[TimestampedValue], window: TimeWindow,
                    ctx: KeyedContext) -> Sequence[TimestampedValue]:
        return self._evict(elements) if self.after else elements


class CountEvictor(_BeforeOrAfter):
    """Keeps the last ``count`` elements of the window."""

    def __init__(self, count: int, after: bool = False) -> None:
        if count.__class__ is not int or count < 0:
            raise ConfigurationError(f"CountEvictor.of needs a count of 0 or more (an int), got {count!r}")
        super().__init__(after)
        self.count = count

    @classmethod
    def of(cls, count: int, after: bool = False) -> "CountEvictor":
        return cls(count, after)

    def _evict(self, elements: Sequence[TimestampedValue]) -> Sequence[TimestampedValue]:
        return elements[len(elements) - self.count:] if len(elements) > self.count else elements


class TimeEvictor(_BeforeOrAfter):
    """Keeps the elements newer than ``span`` before the window's newest element (by event time):
    removes those at or before ``newest - span``. Does nothing where the elements have no times."""

    def __init__(self, span: Any, after: bool = False) -> None:
        super().__init__(after)
        self.span_ms = window_duration_ms("TimeEvictor", "the span", span, positive=False)

    @classmethod
    def of(cls, span: Any, after: bool = False) -> "TimeEvictor":
        return cls(span, after)

    def _evict(self, elements: Sequence[TimestampedValue]) -> Sequence[TimestampedValue]:
        times = [e.timestamp for e in elements if e.timestamp is not None]
        if not times:
            return elements
        cut = max(times) - self.span_ms
        return [e for e in elements if e.timestamp is None or e.timestamp > cut]


class DeltaEvictor(_BeforeOrAfter):
    """Removes the elements whose ``delta(element, last)`` (of their values) is at least
    ``threshold``, ``last`` being the window's last element."""

    def __init__(self, threshold: Any, delta: Callable[[Any, Any], Any], after: bool = False) -> None:
        if not callable(delta):
            raise ConfigurationError(f"DeltaEvictor.of needs a delta function of two values, got {delta!r}")
        super().__init__(after)
        self.threshold, self.delta = threshold, delta

    @classmethod
    def of(cls, threshold: Any, delta: Callable[[Any, Any], Any], after: bool = False) -> "DeltaEvictor":
        return cls(threshold, delta, after)

    def _evict(self, elements: Sequence[TimestampedValue]) -> Sequence[TimestampedValue]:
        if not elements:
            return elements
        last = elements[-1].value
        return [e for e in elements if self.delta(e.value, last) < self.threshold]
