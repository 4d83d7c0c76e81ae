"""Three event-time pipelines on statekit's timers and windows, each with a generator of its input
and a plain-Python recomputation of what it must emit (used by ``windows_demo.py`` and the tests):

- ``hourly_average``: each sensor's average temperature per event-time hour (a tumbling window);
- ``JumpAlert``: an alert when two readings of a sensor less than one minute apart differ by more
  than 20 degrees (keyed state plus an event-time timer per reading that forgets it a minute later);
- ``user_sessions``: each user's sessions, closed after 30 minutes without events (merging windows).

Input epochs move event time forward about ten minutes each, with rows out of order and some
late. Every job runs with ``event_time="ts"`` (epoch milliseconds) and ``WATERMARK_DELAY``.
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Iterator

from statekit import KeyedProcessFunction, MapStateDescriptor, windows
from statekit.runtime.event_time import MAX_EVENT_TIME, WATERMARK, EventTime, duration_ms
from statekit.spi import AggregateFunction

T0 = 1_700_000_000_000  # epoch milliseconds, 2023-11-14 22:13:20 UTC
MINUTE = 60_000
HOUR = 60 * MINUTE
WATERMARK_DELAY = "5 minutes"
READINGS = "sensor string, ts long, temperature double"
EVENTS = "user string, ts long, page string"
HOURLY_OUTPUT = "sensor string, start long, end long, average double"
ALERT_OUTPUT = "sensor string, first_ts long, second_ts long, difference double"
SESSION_OUTPUT = "user string, start long, end long, events long"


# --- 1. hourly average temperature per sensor
class Average(AggregateFunction):
    def create_accumulator(self) -> tuple[float, int]:
        return (0.0, 0)

    def add(self, value: float, accumulator: tuple[float, int]) -> tuple[float, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[float, int]) -> float:
        return round(accumulator[0] / accumulator[1], 6)

    def merge(self, a: tuple[float, int], b: tuple[float, int]) -> tuple[float, int]:
        return (a[0] + b[0], a[1] + b[1])


def hourly_average() -> windows.WindowOperator:
    return windows.aggregate(windows.TumblingWindows.of("1 hour"), Average(), timestamp="ts",
                             value=lambda row: row["temperature"])


# --- 2. two readings within a minute more than 20 degrees apart
class JumpAlert(KeyedProcessFunction):
    """Keeps each sensor's readings of the last minute of event time (a map from timestamp to
    temperatures); a reading is compared with them, then kept until an event-time timer one
    minute after it removes it."""

    def open(self, ctx):
        self.recent = ctx.get_state(MapStateDescriptor("recent-readings"))

    def process(self, row, ctx):
        ts, temperature = row["ts"], row["temperature"]
        for other_ts, temperatures in self.recent.items():
            if abs(other_ts - ts) < MINUTE:
                for other in temperatures:
                    if abs(other - temperature) > 20:
                        first, second = sorted([(other_ts, other), (ts, temperature)])
                        yield (ctx.current_key, first[0], second[0], round(abs(other - temperature), 6))
        self.recent.put(ts, (self.recent.get(ts) or []) + [temperature])
        ctx.timer_service().register_event_time_timer(ts + MINUTE)

    def on_timer(self, timestamp, ctx):
        self.recent.remove(timestamp - MINUTE)


# --- 3. user sessions closed by 30 minutes of inactivity
SESSION_GAP = 30 * MINUTE


def user_sessions() -> windows.WindowOperator:
    return windows.aggregate(windows.SessionWindows.with_gap("30 minutes"), windows.Count(), timestamp="ts")


# --- inputs
def sensor_epochs(n_epochs: int, rows_per_epoch: int, n_sensors: int = 20, seed: int = 1) -> list[list[tuple]]:
    rng = random.Random(seed)
    temperature = {f"s{i:02d}": 20.0 for i in range(n_sensors)}
    epochs = []
    for epoch in range(n_epochs):
        rows = []
        for _ in range(rows_per_epoch):
            sensor = f"s{rng.randrange(n_sensors):02d}"
            temperature[sensor] += rng.choice([-1.5, -0.5, 0.5, 1.5] * 5 + [25.0, -25.0])
            rows.append((sensor, T0 + epoch * 10 * MINUTE + rng.randrange(-8 * MINUTE, 10 * MINUTE),
                         round(temperature[sensor], 1)))
        epochs.append(rows)
    return epochs


def click_epochs(n_epochs: int, rows_per_epoch: int, n_users: int = 30, seed: int = 2) -> list[list[tuple]]:
    rng = random.Random(seed)
    epochs = []
    for epoch in range(n_epochs):
        active = rng.sample(range(n_users), n_users // 3)  # a third of the users are active per epoch
        epochs.append([(f"u{rng.choice(active):02d}", T0 + epoch * 10 * MINUTE + rng.randrange(-8 * MINUTE, 10 * MINUTE),
                        rng.choice(["home", "search", "cart"])) for _ in range(rows_per_epoch)])
    return epochs


def closing_epochs(key: str, n: int = 2) -> list[list[tuple]]:
    """Epochs far ahead in event time that move the watermark past every open window."""
    return [[(key, T0 + 1000 * HOUR, 0.0)]] * n


# --- plain-Python recomputations: each epoch's expected output rows
def _watermarks(epochs: list[list[tuple]]) -> Iterator[tuple[int, list[tuple]]]:
    """Each epoch's watermark and its rows."""
    rule = EventTime(duration_ms(WATERMARK_DELAY, "delay"))
    properties = None
    for rows in epochs:
        watermark, seen = rule.epoch_start(properties)
        yield watermark, rows
        seen = max([seen, *(row[1] for row in rows)])
        properties = {WATERMARK: watermark, MAX_EVENT_TIME: seen}


def expected_hourly(epochs: list[list[tuple]]) -> list[list[tuple]]:
    """A window judges its rows: one behind the watermark still counts while its hour is open."""
    open_hours: dict[tuple[str, int], list[float]] = defaultdict(list)
    outputs = []
    for watermark, rows in _watermarks(epochs):
        for sensor, ts, temperature in rows:
            start = ts - ts % HOUR
            if start + HOUR - 1 > watermark:
                open_hours[(sensor, start)].append(temperature)
        closed = sorted(k for k in open_hours if k[1] + HOUR - 1 <= watermark)
        outputs.append([(sensor, start, start + HOUR, round(sum(open_hours[(sensor, start)]) /
                                                            len(open_hours.pop((sensor, start))), 6))
                        for sensor, start in closed])
    return outputs


def expected_alerts(epochs: list[list[tuple]]) -> list[list[tuple]]:
    """Every pair of non-late readings of a sensor less than a minute apart and more than 20
    degrees different, in the epoch where the second of the two arrives (the runner drops the
    readings at or behind the watermark)."""
    kept: dict[str, list[tuple[int, float]]] = defaultdict(list)
    outputs = []
    for watermark, rows in _watermarks(epochs):
        out = []
        for sensor, ts, temperature in (row for row in rows if row[1] > watermark):
            for other_ts, other in kept[sensor]:
                if abs(other_ts - ts) < MINUTE and abs(other - temperature) > 20:
                    first, second = sorted([(other_ts, other), (ts, temperature)])
                    out.append((sensor, first[0], second[0], round(abs(other - temperature), 6)))
            kept[sensor].append((ts, temperature))
        outputs.append(out)
    return outputs


def expected_sessions(epochs: list[list[tuple]]) -> list[list[tuple]]:
    """Sessions as the window operator keeps them: an event joins the open sessions it touches (one
    behind the watermark too) and is dropped when the merged session is closed already."""
    sessions: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # (start, end, events)
    outputs = []
    for watermark, rows in _watermarks(epochs):
        for user, ts, _ in rows:
            start, end, events = ts, ts + SESSION_GAP, 1
            touched = [s for s in sessions[user] if s[1] - 1 > watermark and s[0] <= end and s[1] >= start]
            for s in touched:
                start, end, events = min(start, s[0]), max(end, s[1]), events + s[2]
            if end - 1 > watermark:
                sessions[user] = [s for s in sessions[user] if s not in touched] + [(start, end, events)]
        out = []
        for user in sorted(sessions):
            out += [(user, *s) for s in sorted(sessions[user]) if s[1] - 1 <= watermark]
            sessions[user] = [s for s in sessions[user] if s[1] - 1 > watermark]
        outputs.append(out)
    return outputs
