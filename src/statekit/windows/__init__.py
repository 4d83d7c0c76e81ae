"""Windows on keyed state and timers (Flink's window operator), for every backend.

::

    from statekit import windows

    hourly = windows.aggregate(windows.TumblingWindows.of("1 hour"), Average(), timestamp="ts",
                               value=lambda row: row["temperature"])
    process_keyed(readings, "sensor", hourly, "sensor string, start long, end long, avg double",
                  event_time="ts", watermark_delay="10 minutes")

Tumbling, sliding and session windows (``TumblingWindows``, ``SlidingWindows``,
``SessionWindows``, with a gap per element: ``SessionWindows.with_dynamic_gap``; an assigner may
look at the row: ``WindowAssigner.assign_element``), in event time (closed by the watermark) or
processing time (``domain=``), and ``GlobalWindows`` (one window for all of time). A ``Trigger``
(``windows.triggers``: count, continuous, purging, or one of your own) says when windows fire and
purge, by default at their end. ``aggregate`` keeps one accumulator per window, ``process`` keeps
the elements for a ``ProcessWindowFunction`` (an ``Evictor``, ``windows.evictors``, may remove
some when the window fires). ``Count``, ``Sum``, ``Min``, ``Max``, ``Mean``, ``First`` and ``Last``
are ready-made aggregates; with one of them (or a ``VectorizedAggregate`` of your own) and column
names for ``timestamp=`` and ``value=``, tumbling, sliding and session windows aggregate whole
batches with Arrow (``windows.batch``). Windows are ``[start, end)`` in epoch milliseconds.
"""
from statekit.spi.timers import TimeDomain
from statekit.windows.aggregates import Count, First, Last, Max, Mean, Min, Sum, VectorizedAggregate
from statekit.windows.assigners import (
    GLOBAL_WINDOW, DynamicSessionWindows, GlobalWindows, SessionWindows, SlidingWindows, TumblingWindows,
    WindowAssigner,
)
from statekit.windows.evictors import CountEvictor, DeltaEvictor, Evictor, TimeEvictor, TimestampedValue
from statekit.windows.operator import ProcessWindowFunction, WindowOperator, aggregate, default_emit, process
from statekit.windows.time_window import TimeWindow, TimeWindowSerializer
from statekit.windows.triggers import (
    ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountTrigger, EventTimeTrigger, NeverTrigger,
    ProcessingTimeTrigger, PurgingTrigger, Trigger, TriggerContext, TriggerResult,
)

__all__ = ["ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger", "Count", "CountEvictor", "CountTrigger",
           "DeltaEvictor", "DynamicSessionWindows", "EventTimeTrigger", "Evictor", "First", "GLOBAL_WINDOW",
           "GlobalWindows", "Last", "Max", "Mean", "Min", "NeverTrigger", "ProcessWindowFunction",
           "ProcessingTimeTrigger", "PurgingTrigger", "SessionWindows", "SlidingWindows", "Sum", "TimeDomain",
           "TimeEvictor", "TimeWindow", "TimeWindowSerializer", "TimestampedValue", "Trigger", "TriggerContext",
           "TriggerResult", "TumblingWindows", "VectorizedAggregate", "WindowAssigner", "WindowOperator",
           "aggregate", "default_emit", "process"]
