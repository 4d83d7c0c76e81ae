"""Sensor alerts with keyed state, run by statekit's local runner (no Spark needed).

Per sensor it keeps a reading count (ValueState), the last three readings (ListState), the
maximum per hour (MapState) and the mean (AggregatingState); it emits an alert when a reading
exceeds the sensor's running mean by 50%. The job runs three epochs at parallelism 4 with a
checkpoint after each, takes a savepoint, restores it at parallelism 3, runs a fourth epoch,
and checks every sensor's state against a plain-Python recomputation.
"""
from __future__ import annotations

import random
import time
from typing import Iterator

from statekit.runtime import KeyedContext, KeyedProcessFunction, LocalRunner
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

    def process(self, reading: Reading, ctx: KeyedContext) -> Iterator[tuple[str, str, float]]:
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


def main() -> None:
    started = time.perf_counter()
    runner = LocalRunner(SensorAlerts(), key_selector=lambda r: r[0], parallelism=4, job_id="sensor-alerts")
    print(f"statekit local demo: sensor alerts, parallelism 4, {runner.max_parallelism} key groups, "
          f"heap backend, checkpoints in driver memory")
    seen: list[Reading] = []
    for epoch in (1, 2, 3):
        batch = readings(epoch)
        alerts = runner.run_epoch(batch)
        seen += batch
        metadata = runner.latest_metadata()
        size = sum(s.state_size for s in metadata.operator(runner.operator_id).subtasks)
        print(f"  epoch {epoch}: {len(batch):,} readings, {len(alerts)} alerts, checkpoint {metadata.checkpoint_id} "
              f"complete ({size / 1024:.0f} KiB of state)")
    if alerts:
        sensor, message, _ = alerts[0]
        print(f"  e.g. alert for {sensor}: {message}")

    savepoint = runner.savepoint()
    print(f"savepoint taken of checkpoint {savepoint.checkpoint_id}; restoring it at parallelism 3")
    resumed = LocalRunner(SensorAlerts(), key_selector=lambda r: r[0], parallelism=3,
                          max_parallelism=runner.max_parallelism, job_id="sensor-alerts-rescaled")
    resumed.restore_from(savepoint, runner.streams)
    batch = readings(4)
    alerts = resumed.run_epoch(batch)
    seen += batch
    print(f"  epoch 4 at parallelism 3: {len(batch):,} readings, {len(alerts)} alerts")

    expected = recompute(seen)
    mismatches = _compare(resumed, expected)
    elapsed = time.perf_counter() - started
    if mismatches:
        raise SystemExit(f"FAILED: {len(mismatches)} sensors differ from the recomputation, e.g. {mismatches[:3]}")
    print(f"OK: all {len(expected)} sensors' count, recent readings, hourly maxima and mean match a "
          f"plain-Python recomputation after checkpoint, savepoint and rescale 4 -> 3 ({elapsed:.1f} s)")


def _compare(runner: LocalRunner, expected: dict[str, dict]) -> list[str]:
    """Read every sensor's state from the runner's latest checkpoint and diff it."""
    class Dump(KeyedProcessFunction):
        def open(self, ctx):
            self.states = [ctx.get_state(d) for d in (COUNT, RECENT, HOURLY_MAX, MEAN)]

        def process(self, sensor, ctx):
            count, recent, hourly, mean = self.states
            yield sensor, count.value(), recent.get(), dict(hourly.items()), mean.get()

    dump = LocalRunner(Dump(), key_selector=lambda sensor: sensor, parallelism=runner.parallelism,
                       max_parallelism=runner.max_parallelism, job_id="dump")
    dump.restore_from(runner.latest_metadata(), runner.streams)
    mismatches = []
    for sensor, count, recent, hourly, mean in dump.run_epoch(sorted(expected)):
        want = expected[sensor]
        same = (count == want["count"] and recent == want["recent"] and hourly == want["hourly_max"]
                and abs(mean - want["sum"] / want["count"]) < 1e-9)
        if not same:
            mismatches.append(sensor)
    return mismatches


if __name__ == "__main__":
    main()
