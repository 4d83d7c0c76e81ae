"""Window joins (Flink's ``join(...).where(...).window(...)`` and ``coGroup``, with outer joins):
the rows of both inputs with the same key in the same window, paired when the window fires.

A window join is the window operator (``windows``) over the rows of both inputs, each kept as an
(input, row) element of its window, so tumbling, sliding and session windows (sessions bridged by
the rows of either input), triggers, allowed lateness, restores, rescaling and backend switches
are the window operator's. When a window fires, every left row is paired with every right row of
it; an outer join emits the rows of a side without a partner in the window with None.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from statekit.joins.join_type import JoinFunction, JoinType, pair_function
from statekit.runtime.function import KeyedContext, KeyedCoProcessFunction
from statekit.runtime.inputs import INPUT_NAMES, per_input, row_reader
from statekit.spi.errors import ConfigurationError
from statekit.spi.timers import TimeDomain
from statekit.windows.assigners import WindowAssigner
from statekit.windows.operator import ProcessWindowFunction, WindowOperator, process
from statekit.windows.time_window import TimeWindow
from statekit.windows.triggers import Trigger


class _Pairs(ProcessWindowFunction):
    """A window's (input, row) elements as joined rows."""

    def __init__(self, how: JoinType, join: JoinFunction) -> None:
        self._how, self._join = how, join

    def process(self, key: Any, window: TimeWindow, elements: list[Any], ctx: KeyedContext) -> Iterator[Any]:
        lefts = [row for side, row in elements if side == 0]
        rights = [row for side, row in elements if side == 1]
        pairs: Iterable[tuple[Any, Any]] = ((left, right) for left in lefts for right in rights)
        if not rights and self._how.keeps_unmatched(0):
            pairs = ((left, None) for left in lefts)
        elif not lefts and self._how.keeps_unmatched(1):
            pairs = ((None, right) for right in rights)
        for left, right in pairs:
            output = self._join(left, right)
            if output is not None:
                yield output


class WindowJoin(KeyedCoProcessFunction):
    """``window_join`` builds one."""

    def __init__(self, operator: WindowOperator) -> None:
        self._operator = operator
        #: as the window operator: rows behind the watermark still join open windows
        self.judges_lateness = operator.judges_lateness

    def open(self, ctx: KeyedContext) -> None:
        self._operator.open(ctx)

    def process_left(self, row: Any, ctx: KeyedContext) -> Iterator[Any]:
        return self._operator.process((0, row), ctx)

    def process_right(self, row: Any, ctx: KeyedContext) -> Iterator[Any]:
        return self._operator.process((1, row), ctx)

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterator[Any]:
        return self._operator.on_timer(timestamp, ctx)

    def close(self) -> None:
        self._operator.close()


def window_join(assigner: WindowAssigner, *, time: Any = None, how: Any = "inner", join: JoinFunction | None = None,
                allowed_lateness: Any = "0 ms", trigger: Trigger | None = None) -> WindowJoin:
    """A ``KeyedCoProcessFunction`` that pairs the rows of two keyed inputs with the same key in
    the same window of ``assigner`` (``windows.TumblingWindows``, ``SlidingWindows``,
    ``SessionWindows``, ...) when the window fires. ``time``: each row's event time for event-time
    windows, a column name or a function of the row, one for both inputs or a dict of one per input.
    ``how``: ``"inner"`` (every pair of the window), ``"left_outer"``, ``"right_outer"`` or
    ``"full_outer"`` (a window with rows of one input only emits each of them with None for the
    other side). ``join(left, right)`` makes the output row of a pair (default: the pair); returning
    None emits nothing. ``allowed_lateness`` and ``trigger`` are the window operator's: a window
    that fires again emits its pairs again."""
    if time is None and assigner.domain is TimeDomain.EVENT_TIME and assigner.ends:
        raise ConfigurationError("an event-time window join needs time=: each row's event time (a column name or a "
                                 "function of the row), one for both inputs or a dict of one per input")
    readers = tuple(row_reader(t, "time=") for t in per_input("time", time, INPUT_NAMES)) if time is not None else None
    timestamp = (lambda element: readers[element[0]](element[1])) if readers is not None else None
    return WindowJoin(process(assigner, _Pairs(JoinType.of(how), pair_function(join)), timestamp=timestamp,
                              allowed_lateness=allowed_lateness, trigger=trigger))
