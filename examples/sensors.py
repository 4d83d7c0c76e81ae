"""The sensor pipeline shared by the demos: a keyed function, its input and a plain-Python
recomputation of the state it must hold.

Per sensor it keeps a reading count (ValueState), the last three readings (ListState), the
maximum per hour (MapState) and the mean (AggregatingState); it emits an alert when a reading
exceeds the sensor's running mean by 50%.
"""
from __future__ import annotations

import json
import random
from typing import Any, Iterator

from statekit.runtime import KeyedContext, KeyedProcessFunction
from statekit.serializers import Float64Serializer, Int64Serializer
from statekit.spi import (
    AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
    ValueStateDescriptor,
)

Reading = tuple[str, int, float]  # (sensor id, hour, temperature)


class Mean(AggregateFunction):
    def create_accumulator(self):
        return (0.0, 0)

    def add(self, value, accumulator):
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]


COUNT = ValueStateDescriptor("count", Int64Serializer(), default=0)
RECENT = ListStateDescriptor("recent", Float64Serializer())
HOURLY_MAX = MapStateDescriptor("hourly-max", Int64Serializer(), Float64Serializer())
MEAN = AggregatingStateDescriptor("mean", Mean())


class SensorAlerts(KeyedProcessFunction):
    def open(self, ctx: KeyedContext) -> None:
        self.count = ctx.get_state(COUNT)
        self.recent = ctx.get_state(RECENT)
        self.hourly_max = ctx.get_state(HOURLY_MAX)
        self.mean = ctx.get_state(MEAN)

    def process(self, reading: Reading | dict[str, Any], ctx: KeyedContext) -> Iterator[tuple[str, str, float]]:
        if isinstance(reading, dict):  # a row of a DataFrame
            reading = (reading["sensor"], reading["hour"], reading["temperature"])
        sensor, hour, temperature = reading
        mean_before = self.mean.get()
        self.count.update(self.count.value() + 1)
        self.recent.update(self.recent.get()[-2:] + [temperature])
        previous_max = self.hourly_max.get(hour)
        if previous_max is None or temperature > previous_max:
            self.hourly_max.put(hour, temperature)
        self.mean.add(temperature)
        if mean_before is not None and self.count.value() > 5 and temperature > 1.5 * mean_before:
            yield sensor, f"hour {hour}: {temperature:.1f} is over 150% of the mean {mean_before:.1f}", temperature


def readings(epoch: int, n: int = 20_000, sensors: int = 500) -> list[Reading]:
    rng = random.Random(epoch)
    out = []
    for i in range(n):
        sensor = f"sensor-{rng.randrange(sensors):03d}"
        spike = rng.random() < 0.01
        out.append((sensor, epoch * 10 + i * 10 // n, rng.gauss(20, 2) * (2.0 if spike else 1.0)))
    return out


def recompute(all_readings: list[Reading]) -> dict[str, dict]:
    """The state every sensor must hold, computed without statekit."""
    expected: dict[str, dict] = {}
    for sensor, hour, temperature in all_readings:
        s = expected.setdefault(sensor, {"count": 0, "recent": [], "hourly_max": {}, "sum": 0.0})
        s["count"] += 1
        s["recent"] = (s["recent"] + [temperature])[-3:]
        s["hourly_max"][hour] = max(s["hourly_max"].get(hour, temperature), temperature)
        s["sum"] += temperature
    return expected


def matches(found: dict[str, tuple], expected: dict[str, dict]) -> list[str]:
    """Sensors whose (count, recent, hourly maxima, mean accumulator) differ from the recomputation."""
    mismatches = [s for s in expected if s not in found]
    for sensor, (count, recent, hourly, (total, n)) in found.items():
        want = expected.get(sensor)
        if want is None or not (count == want["count"] and recent == want["recent"]
                                and hourly == want["hourly_max"] and n == want["count"]
                                and abs(total - want["sum"]) < 1e-6):
            mismatches.append(sensor)
    return mismatches


def query_state(path: str, sensors: list[str]) -> dict[str, tuple]:
    """Each sensor's (count, recent, hourly maxima, mean accumulator) in a completed checkpoint or
    savepoint, looked up key by key without Spark (``statekit.query.QueryableState``)."""
    from statekit.query import QueryableState

    state = QueryableState(path)
    found = {}
    for sensor in sensors:
        cells = [state.get(descriptor.name, sensor) for descriptor in (COUNT, RECENT, HOURLY_MAX, MEAN)]
        if cells[0] is not None:
            found[sensor] = tuple(cells)
    return found


def read_state(spark: Any, path: str) -> dict[str, tuple]:
    """Every sensor's (count, recent, hourly maxima, mean accumulator) in a completed checkpoint or
    savepoint, read as DataFrames with ``spark.read.format("statekit")``, one state at a time so
    that each value column has the state's type."""
    def rows(descriptor: Any) -> list[Any]:
        frame = spark.read.format("statekit").option("state", descriptor.name).load(path)
        return frame.select("sensor", "user_key", "value").collect()  # a list's elements in order

    found: dict[str, list] = {row.sensor: [row.value, [], {}, None] for row in rows(COUNT)}
    for row in rows(RECENT):
        found[row.sensor][1].append(row.value)
    for row in rows(HOURLY_MAX):
        found[row.sensor][2][row.user_key] = row.value
    for row in rows(MEAN):  # the accumulator (sum, count), pickled: JSON text in the value column
        found[row.sensor][3] = tuple(json.loads(row.value))
    return {sensor: tuple(cells) for sensor, cells in found.items()}
