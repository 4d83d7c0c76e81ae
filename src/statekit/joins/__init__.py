"""Joins of two keyed inputs on state and timers (as ``statekit.windows`` is windows on them), run
as the ``KeyedCoProcessFunction`` of a job of two inputs (``process_connected``, the local runner):

::

    from statekit import joins

    clicked = joins.interval_join(time="ts", lower="0 s", upper="10 minutes", how="left_outer",
                                  join=lambda impression, click: (impression["ad"], click is not None))
    process_connected(impressions, clicks, "ad", clicked, "ad string, clicked boolean",
                      event_time="ts", watermark_delay="1 minute")

``interval_join`` pairs rows within a time interval of each other; ``window_join`` pairs the rows
of a window (tumbling, sliding, session). Both are inner, left, right or full outer joins.
"""
from statekit.joins.interval import IntervalJoin, interval_join
from statekit.joins.join_type import JoinFunction, JoinType
from statekit.joins.window import WindowJoin, window_join

__all__ = ["IntervalJoin", "JoinFunction", "JoinType", "WindowJoin", "interval_join", "window_join"]
