"""A job with event-time and processing-time timers, and its oracle, for the timers level.

``WindowCountFunction`` counts each key's rows per one-second event-time window (window state in
a namespace per window, one event-time timer per window end) and emits ``("window", key, end,
count)`` when the watermark passes the window's end; every row also registers a processing-time
timer one minute after the epoch's processing time, emitting ``("idle", key, timestamp, None)``. The
oracle replays the same rules (watermark per epoch, late rows dropped) in plain Python.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

from statekit.runtime.event_time import MAX_EVENT_TIME, WATERMARK, EventTime, event_time_ms, is_late
from statekit.runtime.function import KeyedContext, KeyedProcessFunction
from statekit.serializers import Int64Serializer
from statekit.spi import ValueStateDescriptor
from statekit.spi.timers import TimeDomain

WINDOW_MS = 1000
IDLE_MS = 60_000
WATERMARK_DELAY = "2 seconds"
DELAY_MS = 2000
EPOCH_MS = 30_000  # the processing time advances this much per epoch
T0 = 1_700_000_000_000

TimedRow = tuple[str, int]  # (key, event time in epoch ms)
WINDOW_COUNT = ValueStateDescriptor("window-count", Int64Serializer(), default=0)


def window_end(timestamp: int) -> int:
    return timestamp - timestamp % WINDOW_MS + WINDOW_MS - 1


class WindowCountFunction(KeyedProcessFunction):
    def open(self, ctx: KeyedContext) -> None:
        self.count = ctx.get_state(WINDOW_COUNT, Int64Serializer())

    def process(self, row: TimedRow | dict[str, Any], ctx: KeyedContext) -> None:
        end = window_end(event_time_ms(row["ts"] if isinstance(row, dict) else row[1]))  # Spark: a dict
        self.count.set_current_namespace(end)
        self.count.update(self.count.value() + 1)
        timers = ctx.timer_service()
        timers.register_event_time_timer(end)
        timers.register_processing_time_timer(timers.current_processing_time() + IDLE_MS)

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterator[tuple[Any, ...]]:
        if ctx.time_domain is TimeDomain.PROCESSING_TIME:
            yield ("idle", ctx.current_key, timestamp, None)
            return
        self.count.set_current_namespace(timestamp)
        yield ("window", ctx.current_key, timestamp, self.count.value())
        self.count.clear()


def make_timed_epochs(n_epochs: int, rows_per_epoch: int, n_keys: int, seed: int) -> list[list[TimedRow]]:
    """Epochs of rows whose event times move forward about 1.5 s per epoch, some out of order and
    some late (at or behind the watermark)."""
    import random

    rng = random.Random(seed)
    epochs = []
    for epoch in range(n_epochs):
        base = T0 + epoch * 1500
        epochs.append([(f"key-{rng.randrange(n_keys)}", base + rng.randrange(-3000, 2500))
                       for _ in range(rows_per_epoch)])
    return epochs


def epoch_clock(start: int = T0) -> Any:
    """A clock for the local runner: each call (one per epoch) ``EPOCH_MS`` later."""
    times = iter(range(start, start + 10 ** 12, EPOCH_MS))
    return lambda: next(times)


def timer_oracle(epochs: Sequence[Sequence[TimedRow]], start: int = T0,
                 open_windows: dict[tuple[str, int], int] | None = None) -> list[list[tuple[Any, ...]]]:
    """Each epoch's expected output (in any order) for ``WindowCountFunction``; ``open_windows``
    receives the (key, window end) -> count of the windows still open after the last epoch."""
    rule = EventTime.of(WATERMARK_DELAY)
    counts: dict[tuple[str, int], int] = {}
    idle: set[tuple[str, int]] = set()
    properties: dict[str, int] | None = None
    outputs = []
    for number, rows in enumerate(epochs):
        processing_time = start + number * EPOCH_MS
        watermark, seen = rule.epoch_start(properties)
        for key, timestamp in rows:
            seen = max(seen, timestamp)
            if is_late(timestamp, watermark):
                continue
            counts[(key, window_end(timestamp))] = counts.get((key, window_end(timestamp)), 0) + 1
            idle.add((key, processing_time + IDLE_MS))
        out: list[tuple[Any, ...]] = []
        for (key, end), count in sorted(counts.items()):
            if end <= watermark:
                out.append(("window", key, end, count))
                del counts[(key, end)]
        for key, timestamp in sorted(idle):
            if timestamp <= processing_time:
                out.append(("idle", key, timestamp, None))
                idle.discard((key, timestamp))
        outputs.append(out)
        properties = {WATERMARK: watermark, MAX_EVENT_TIME: seen}
    if open_windows is not None:
        open_windows.update(counts)
    return outputs
