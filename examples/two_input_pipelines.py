"""Two pipelines of two inputs, each with a generator of its input and a plain-Python recomputation
of what it must emit (used by ``orders_demo.py`` and the tests):

- ``UnpaidOrders``: orders and payments joined by order id (connected keyed inputs, each with its
  own event time and watermark delay), and an alert for an order still unpaid 15 minutes after it
  was placed (an event-time timer);
- ``ThresholdAlerts``: sensor readings against a threshold per sensor type that arrives as a
  broadcast input and changes mid-run (the broadcast state pattern, with ``apply_to_keyed_state``
  checking every sensor's last reading again when a threshold changes).
"""
from __future__ import annotations

import json
import os
import random
from typing import Sequence

from statekit import MapStateDescriptor, ValueStateDescriptor
from statekit.runtime.function import KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from statekit.spi.timers import MIN_TIMESTAMP

MINUTE = 60_000
T0 = 1_700_000_000_000
ORDERS = "order_id string, ts long, amount long"
PAYMENTS = "order_id string, ts long, method string"
ORDER_ALERTS = "order_id string, kind string, ordered_at long"
READINGS = "sensor string, type string, value long"
RULES = "type string, limit long"
SENSOR_ALERTS = "kind string, name string, value long"


class UnpaidOrders(KeyedCoProcessFunction):
    """Orders (left) and payments (right) by order id: ("paid", order time) once both are there,
    ("unpaid", order time) when the watermark passes 15 minutes after an unpaid order."""

    def open(self, ctx):
        self.ordered = ctx.get_state(ValueStateDescriptor("ordered-at"))
        self.paid = ctx.get_state(ValueStateDescriptor("paid", default=False))

    def process_left(self, order, ctx):
        self.ordered.update(order["ts"])
        ctx.timer_service().register_event_time_timer(order["ts"] + 15 * MINUTE)
        if self.paid.value():
            yield ctx.current_key, "paid", order["ts"]

    def process_right(self, payment, ctx):
        if self.paid.value():
            return
        self.paid.update(True)
        if self.ordered.value() is not None:
            yield ctx.current_key, "paid", self.ordered.value()

    def on_timer(self, timestamp, ctx):
        if not self.paid.value():
            yield ctx.current_key, "unpaid", self.ordered.value()
        self.ordered.clear()
        self.paid.clear()


def order_epochs(n_epochs=8, orders_per_epoch=40, seed=7):
    """Epochs of ("left", order) and ("right", payment) records, event time about ten minutes
    further each epoch; three of four orders are paid, up to 20 minutes later, some in the same
    epoch as the order (before or after it), some epochs later, some late."""
    rng = random.Random(seed)
    epochs = [[] for _ in range(n_epochs + 4)]
    number = 0
    for epoch in range(n_epochs):
        for _ in range(orders_per_epoch):
            number += 1
            ts = T0 + epoch * 10 * MINUTE + rng.randrange(10 * MINUTE)
            epochs[epoch].append(("left", {"order_id": f"o{number}", "ts": ts, "amount": rng.randrange(1, 500)}))
            if rng.random() < 0.75:
                paid_at = ts + rng.randrange(20 * MINUTE)
                arrives = epoch + rng.choice([0, 0, 0, 1, 1, 2])
                epochs[arrives].append(("right", {"order_id": f"o{number}", "ts": paid_at, "method": "card"}))
    for records in epochs:
        rng.shuffle(records)
    # the last epochs move the watermark past every order, so that every alert is due at the end
    epochs[-2].append(("left", {"order_id": "closing", "ts": T0 + 100 * 60 * MINUTE, "amount": 0}))
    epochs[-2].append(("right", {"order_id": "closing", "ts": T0 + 100 * 60 * MINUTE, "method": "card"}))
    return epochs


def recompute_orders(epochs, delays=(5 * MINUTE, 1 * MINUTE)):
    """Each epoch's expected rows: the watermark of epoch N is the smaller of the two inputs' (each
    input's largest event time before N minus its delay; no watermark until both have one); rows
    at or behind it are dropped; timers due by it fire after the epoch's rows."""
    seen = [None, None]
    watermark = MIN_TIMESTAMP
    ordered, paid, timers = {}, set(), {}
    outputs = []
    for records in epochs:
        if None not in seen:
            watermark = max(watermark, min(t - d for t, d in zip(seen, delays)))
        out = []
        for side, row in records:
            index = ("left", "right").index(side)
            seen[index] = max(seen[index] or MIN_TIMESTAMP, row["ts"])
            if row["ts"] <= watermark:
                continue
            key = row["order_id"]
            if side == "left":
                ordered[key] = row["ts"]
                timers[key] = row["ts"] + 15 * MINUTE
                if key in paid:
                    out.append((key, "paid", row["ts"]))
            elif key not in paid:
                paid.add(key)
                if key in ordered:
                    out.append((key, "paid", ordered[key]))
        for key in [k for k, due in timers.items() if due <= watermark]:
            if key not in paid:
                out.append((key, "unpaid", ordered[key]))
            ordered.pop(key, None)
            paid.discard(key)
            del timers[key]
        outputs.append(out)
    return outputs


THRESHOLDS = MapStateDescriptor("thresholds")


class ThresholdAlerts(KeyedBroadcastProcessFunction):
    """Readings of sensors (keyed by sensor) against a threshold per sensor type, given by the
    broadcast input: an alert per reading above its type's threshold; when a threshold changes,
    every sensor of that type whose last reading is above the new one alerts again."""

    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last-reading"))

    def process_broadcast(self, rule, ctx):
        ctx.broadcast_state(THRESHOLDS).put(rule["type"], rule["limit"])
        if ctx.subtask_index == 0:
            yield "rule", rule["type"], rule["limit"]
        alerts = []

        def recheck(sensor, last):
            reading = last.value()
            if reading["type"] == rule["type"] and reading["value"] > rule["limit"]:
                alerts.append(("recheck", sensor, reading["value"]))

        ctx.apply_to_keyed_state(ValueStateDescriptor("last-reading"), recheck)
        yield from alerts

    def process(self, reading, ctx):
        self.last.update(reading)
        limit = ctx.broadcast_state(THRESHOLDS).get(reading["type"])
        if limit is not None and reading["value"] > limit:
            yield "alert", reading["sensor"], reading["value"]


def sensor_epochs(n_epochs=6, seed=3):
    rng = random.Random(seed)
    types = {f"s{i:02d}": rng.choice(["temp", "pressure", "humidity"]) for i in range(30)}
    readings = [[{"sensor": s, "type": types[s], "value": rng.randrange(100)}
                 for s in rng.sample(sorted(types), 20)] for _ in range(n_epochs)]
    rules = [[{"type": "temp", "limit": 80}, {"type": "pressure", "limit": 90}], [], [{"type": "temp", "limit": 50}],
             [{"type": "humidity", "limit": 70}, {"type": "temp", "limit": 95}], [], [{"type": "pressure", "limit": 10}]]
    return readings, rules[:n_epochs]


def recompute_alerts(readings, rules):
    """Broadcast rows first in each epoch (rules, then rechecks of the last readings), then readings."""
    limits, last, outputs = {}, {}, []
    for epoch_readings, epoch_rules in zip(readings, rules):
        out = []
        for rule in epoch_rules:
            limits[rule["type"]] = rule["limit"]
            out.append(("rule", rule["type"], rule["limit"]))
            out += [("recheck", s, r["value"]) for s, r in last.items()
                    if r["type"] == rule["type"] and r["value"] > rule["limit"]]
        for reading in epoch_readings:
            last[reading["sensor"]] = reading
            if reading["value"] > limits.get(reading["type"], float("inf")):
                out.append(("alert", reading["sensor"], reading["value"]))
        outputs.append(out)
    return outputs




# --- input files for streaming queries: one file per source and micro-batch
#: a row that stands in for an input with no row in an epoch (it is never paid, nor due before the
#: end: it only keeps the two file sources in step)
PLACEHOLDER = {"order_id": "none", "ts": 0, "amount": 0, "method": "none"}


def with_placeholders(epochs: list[list[tuple[str, dict]]]) -> list[list[tuple[str, dict]]]:
    """The epochs with a placeholder row for each input that has none, so that two file sources
    read one file each per micro-batch."""
    return [records + [(side, PLACEHOLDER) for side in ("left", "right") if all(s != side for s, _ in records)]
            for records in epochs]


def write_batches(folder: str, batches: Sequence[Sequence[dict]]) -> None:
    """One file of JSON rows per micro-batch, each modified a second after the one before: a file
    source with ``maxFilesPerTrigger=1`` takes the oldest file first."""
    os.makedirs(folder, exist_ok=True)
    for number, rows in enumerate(batches):
        path = os.path.join(folder, f"{number:03d}.json")
        with open(path, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        os.utime(path, (1_700_000_000 + number,) * 2)


def write_order_batches(epochs: list[list[tuple[str, dict]]], orders_dir: str, payments_dir: str) -> None:
    """The orders and payments of each epoch as one file each (``with_placeholders`` first)."""
    for side, folder in (("left", orders_dir), ("right", payments_dir)):
        write_batches(folder, [[row for s, row in records if s == side] for records in epochs])


# --- impressions and clicks: an interval join
IMPRESSIONS = "ad string, impression_id string, ts long"
CLICKS = "ad string, click_id string, ts long"
CLICK_PAIRS = "impression_id string, click_id string"


def ad_epochs(n_epochs=6, per_epoch=60, seed=2):
    """Epochs of ("left", impression) and ("right", click) records of a few ads, event time about
    a minute further each epoch, out of order by up to 40 seconds; a click comes up to 90 seconds
    after an impression of its ad (a third of them), some in later epochs, some late."""
    rng = random.Random(seed)
    epochs = [[] for _ in range(n_epochs + 3)]
    for epoch in range(n_epochs):
        for n in range(per_epoch):
            ad = f"ad{rng.randrange(5)}"
            ts = T0 + epoch * MINUTE + rng.randrange(-40_000, 20_000)
            epochs[epoch].append(("left", {"ad": ad, "impression_id": f"i{epoch}-{n}", "ts": ts}))
            if rng.random() < 0.35:
                arrives = epoch + rng.choice([0, 0, 1, 2])
                epochs[arrives].append(("right", {"ad": ad, "click_id": f"c{epoch}-{n}",
                                                  "ts": ts + rng.randrange(-10_000, 90_000)}))
    for records in epochs:
        rng.shuffle(records)
    epochs[-2].append(("left", {"ad": "closing", "impression_id": "closing", "ts": T0 + 100 * 60 * MINUTE}))
    epochs[-2].append(("right", {"ad": "closing", "click_id": "closing", "ts": T0 + 100 * 60 * MINUTE}))
    return epochs


def click_pair(impression: dict | None, click: dict | None) -> tuple:
    """The output row of an (impression, click) pair of the interval join: their ids (None for a side
    an outer join emits alone)."""
    return (impression["impression_id"] if impression else None, click["click_id"] if click else None)


def recompute_interval_join(epochs, lower_ms, upper_ms, how="inner", delays=(MINUTE // 2, MINUTE // 2),
                            key="ad", time="ts"):
    """Each epoch's expected (left, right) pairs of an interval join, by brute force: two rows of a
    key pair when neither was late (at or behind the watermark of two inputs) and
    ``left.ts + lower <= right.ts <= left.ts + upper``, in the epoch where the second arrives; an
    outer join's unmatched row comes with None in the first epoch whose watermark reaches the last
    time it could pair (``ts + upper`` for a left row, ``ts - lower`` for a right one)."""
    seen = [None, None]
    watermark = MIN_TIMESTAMP
    kept = [[], []]  # the rows of each input so far, with the epoch they arrived in
    outputs = []
    keeps = {"inner": (), "left_outer": (0,), "right_outer": (1,), "full_outer": (0, 1)}[how]
    paired = set()
    for number, records in enumerate(epochs):
        if None not in seen:
            watermark = max(watermark, min(t - d for t, d in zip(seen, delays)))
        out = []
        for side, row in records:
            index = ("left", "right").index(side)
            seen[index] = max(seen[index] or MIN_TIMESTAMP, row[time])
            if row[time] <= watermark:
                continue
            for other in kept[1 - index]:
                left, right = (row, other) if index == 0 else (other, row)
                if left[key] == right[key] and left[time] + lower_ms <= right[time] <= left[time] + upper_ms:
                    out.append((left, right))
                    paired.update((id(left), id(right)))
            kept[index].append(row)
        for index in keeps:
            due = [r for r in kept[index] if (r[time] + max(upper_ms, 0) if index == 0 else r[time] + max(-lower_ms, 0))
                   <= watermark]
            out += [(r, None) if index == 0 else (None, r) for r in due if id(r) not in paired]
            kept[index] = [r for r in kept[index] if r not in due]
        outputs.append(out)
    return outputs
