"""The interval join (Flink's ``IntervalJoinOperator``, with outer joins as Spark's stream-stream
joins have them): a row of the first input at time ``t`` and a row of the second input of the
same key at time ``u`` are a pair when ``t + lower <= u <= t + upper``.

Each key keeps the rows of both inputs by time (a ``MapState`` per input: time -> [row, matched]).
A row is paired with the buffered rows of the other input within its bounds, then buffered until
no later row can pair with it: a left row at ``t`` until the watermark reaches ``t + upper``, a
right row at ``u`` until it reaches ``u - lower`` (later rows are behind the watermark, so late).
An event-time timer at that time removes it, and an outer join emits it then if it never paired.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from statekit.joins.join_type import JoinFunction, JoinType, pair_function
from statekit.runtime.event_time import duration_ms, event_time_ms
from statekit.runtime.function import KeyedContext, KeyedCoProcessFunction
from statekit.runtime.inputs import INPUT_NAMES, per_input, row_reader
from statekit.serializers.primitives import Int64Serializer, StringSerializer
from statekit.spi.descriptors import MapStateDescriptor
from statekit.spi.errors import ConfigurationError

#: the timer service of interval joins; a timer's namespace is the input of the row it removes
JOIN_TIMERS = "interval-join"


class IntervalJoin(KeyedCoProcessFunction):
    """``interval_join`` builds one."""

    def __init__(self, time: Any, lower_ms: int, upper_ms: int, how: JoinType, join: JoinFunction) -> None:
        if lower_ms > upper_ms:
            raise ConfigurationError(f"an interval join's lower bound ({lower_ms} ms) is after its upper bound "
                                     f"({upper_ms} ms): give lower <= upper")
        readers = tuple(row_reader(t, "time=") for t in per_input("time", time, INPUT_NAMES))
        if None in readers:
            raise ConfigurationError("an interval join needs time=: each row's event time (a column name or a "
                                     "function of the row), one for both inputs or a dict of one per input")
        self._times: tuple[Callable[[Any], Any], ...] = readers  # type: ignore[assignment]
        self.lower_ms, self.upper_ms, self.how, self._join = lower_ms, upper_ms, how, join

    def open(self, ctx: KeyedContext) -> None:
        self._buffers = tuple(ctx.get_state(MapStateDescriptor(f"interval-join-{name}", Int64Serializer()))
                              for name in INPUT_NAMES)
        self._timers = ctx.timer_service(JOIN_TIMERS, StringSerializer())

    def process_left(self, row: Any, ctx: KeyedContext) -> Iterator[Any]:
        return self._process(0, row)

    def process_right(self, row: Any, ctx: KeyedContext) -> Iterator[Any]:
        return self._process(1, row)

    def _process(self, side: int, row: Any) -> Iterator[Any]:
        value = self._times[side](row)
        if value is None:  # a row without event time pairs with nothing: an outer join emits it at once
            if self.how.keeps_unmatched(side):
                yield from self._alone(side, row)
            return
        timestamp = event_time_ms(value)
        # the other input's times this row pairs with: [t + lower, t + upper] for a left row at t
        low, high = ((timestamp + self.lower_ms, timestamp + self.upper_ms) if side == 0
                     else (timestamp - self.upper_ms, timestamp - self.lower_ms))
        matched = False
        other = self._buffers[1 - side]
        for other_time, entries in list(other.items()):
            if not low <= other_time <= high:
                continue
            first_match = [entry for entry in entries if not entry[1]]
            for entry in entries:
                pair = (row, entry[0]) if side == 0 else (entry[0], row)
                output = self._join(*pair)
                if output is not None:
                    yield output
                matched = True
                entry[1] = True
            if first_match and self.how.keeps_unmatched(1 - side):
                other.put(other_time, entries)  # their matched flags, where one changed
        own = self._buffers[side]
        own.put(timestamp, (own.get(timestamp) or []) + [[row, matched]])
        self._timers.register_event_time_timer(self._cleanup_time(side, timestamp), INPUT_NAMES[side])

    def _cleanup_time(self, side: int, timestamp: int) -> int:
        """When no later row of the other input can pair with a row of ``side`` at ``timestamp``."""
        return timestamp + max(self.upper_ms, 0) if side == 0 else timestamp + max(-self.lower_ms, 0)

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterator[Any]:
        side = INPUT_NAMES.index(ctx.timer.namespace)  # type: ignore[union-attr]
        row_time = timestamp - max(self.upper_ms, 0) if side == 0 else timestamp - max(-self.lower_ms, 0)
        buffer = self._buffers[side]
        entries = buffer.get(row_time) or []
        buffer.remove(row_time)
        if self.how.keeps_unmatched(side):
            for row, matched in entries:
                if not matched:
                    yield from self._alone(side, row)

    def _alone(self, side: int, row: Any) -> Iterator[Any]:
        """The output of a row of ``side`` that found no partner (an outer join's)."""
        output = self._join(row, None) if side == 0 else self._join(None, row)
        if output is not None:
            yield output


def interval_join(time: Any, lower: Any, upper: Any, *, how: Any = "inner",
                  join: JoinFunction | None = None) -> IntervalJoin:
    """A ``KeyedCoProcessFunction`` that joins two keyed inputs by time: a left row at ``t`` and a
    right row at ``u`` pair when ``t + lower <= u <= t + upper`` (bounds: durations such as
    ``"-5 minutes"``, ``"10 minutes"``, a ``timedelta``, or milliseconds). ``time``: each row's
    event time, a column name or a function of the row, one for both inputs or a dict of one per
    input (a row without one pairs with nothing). ``how``: ``"inner"``, ``"left_outer"``,
    ``"right_outer"`` or ``"full_outer"`` (an unmatched row is emitted once the watermark passes
    the last time it could pair, with None for the other side). ``join(left, right)`` makes the output row of a pair (default: the pair);
    returning None emits nothing. Run it with ``process_connected`` (or the local runner) with the
    job's event time, whose late rows are dropped."""
    return IntervalJoin(time, _bound_ms(lower, "lower"), _bound_ms(upper, "upper"), JoinType.of(how),
                        pair_function(join))


def _bound_ms(value: Any, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return duration_ms(value, f"the interval join's {name} bound", signed=True)
