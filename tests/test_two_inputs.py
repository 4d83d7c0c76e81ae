"""Two inputs on the local runner, on every backend: connected keyed inputs (orders and payments
joined by order id, with a timer alert for unpaid orders) and the broadcast state pattern
(thresholds per sensor type as a broadcast input that changes mid-run), each checked against a
plain-Python recomputation across rescales 4 -> 3 -> 8 and a backend switch through a savepoint;
the watermark of two inputs (the smaller of theirs); and the function kinds each entry takes."""
from __future__ import annotations

import random

import pytest

from statekit import MapStateDescriptor, ValueStateDescriptor
from statekit.backends.heap import HeapStateBackend
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.compare import assert_same_rows
from statekit.runtime import LocalRunner
from statekit.runtime.event_time import INPUT_EVENT_TIMES, WATERMARK
from statekit.runtime.function import (
    KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedProcessFunction,
)
from statekit.spi import ConfigurationError, StateAccessError
from statekit.spi.timers import MIN_TIMESTAMP

MINUTE = 60_000
T0 = 1_700_000_000_000
BACKENDS = {"heap": HeapStateBackend, "rocksdb": RocksDBStateBackend, "lmdb": LMDBStateBackend}
#: each backend's run switches to the next one through a savepoint
SWITCH = {"heap": "rocksdb", "rocksdb": "lmdb", "lmdb": "heap"}


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
    epochs = [[] for _ in range(n_epochs + 3)]
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
    epochs[-1].append(("left", {"order_id": "closing", "ts": T0 + 100 * 60 * MINUTE, "amount": 0}))
    epochs[-1].append(("right", {"order_id": "closing", "ts": T0 + 100 * 60 * MINUTE, "method": "card"}))
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


def orders_runner(backend, parallelism=4, **options):
    return LocalRunner(UnpaidOrders(), key_selector=lambda row: row["order_id"], parallelism=parallelism,
                       max_parallelism=64, state_backend=BACKENDS[backend](), event_time="ts",
                       watermark_delay={"left": "5 minutes", "right": "1 minute"}, **options)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_orders_and_payments_match_the_recomputation_across_rescales_and_a_backend_switch(backend):
    epochs = order_epochs()
    expected = recompute_orders(epochs)
    run = orders_runner(backend)
    for number, records in enumerate(epochs):
        if number == 2:
            run.rescale(3)
        if number == 4:
            run.rescale(8)
        if number == 6:  # pending timers and both inputs' state move to another backend
            switched = orders_runner(SWITCH[backend], parallelism=3, job_id="switched")
            switched.restore_from(run.savepoint(), run.streams)
            run = switched
        assert_same_rows(run.run_epoch(records), expected[number], f"{backend}, epoch {number + 1}")
    found = [row for rows in expected for row in rows]
    assert {kind for _, kind, _ in found} == {"paid", "unpaid"} and len(found) > 200
    recorded = run.latest_metadata().properties
    assert recorded[INPUT_EVENT_TIMES] == [max(r["ts"] for e in epochs for s, r in e if s == side)
                                           for side in ("left", "right")]


def test_a_replayed_epoch_fires_the_same_timers_and_gives_the_same_output():
    epochs = order_epochs(n_epochs=5, seed=11)
    run = orders_runner("rocksdb")
    first = [run.run_epoch(records) for records in epochs[:4]]
    again = run.run_epoch(epochs[3], checkpoint_id=4)  # restores checkpoint 3, as a replay of epoch 4 does
    assert sorted(again) == sorted(first[3]) and any(kind == "unpaid" for _, kind, _ in again)


def test_the_watermark_of_two_inputs_is_the_smaller_one_and_waits_for_both():
    run = orders_runner("heap", parallelism=2)
    run.run_epoch([("left", {"order_id": "a", "ts": T0 + 60 * MINUTE})])
    run.run_epoch([])
    assert run.latest_metadata().properties[WATERMARK] == MIN_TIMESTAMP, "no payment yet: no watermark"
    run.run_epoch([("right", {"order_id": "b", "ts": T0 + 10 * MINUTE})])
    run.run_epoch([])
    assert run.latest_metadata().properties[WATERMARK] == T0 + 9 * MINUTE, "the payments' (10 - 1), not 60 - 5"
    out = run.run_epoch([("right", {"order_id": "c", "ts": T0 + 9 * MINUTE}),
                         ("left", {"order_id": "d", "ts": T0 + 9 * MINUTE + 1})])
    properties = run.latest_metadata().properties
    assert properties["late_rows_dropped"] == 1 and out == []
    assert properties[INPUT_EVENT_TIMES] == [T0 + 60 * MINUTE, T0 + 10 * MINUTE]


def test_records_of_two_inputs_are_named_pairs():
    run = orders_runner("heap")
    with pytest.raises(ConfigurationError, match="pair \\(input, row\\)"):
        run.run_epoch([{"order_id": "a", "ts": T0}])
    with pytest.raises(ConfigurationError, match="names each input"):
        LocalRunner(UnpaidOrders(), key_selector={"orders": lambda row: row["order_id"]})


# --- the broadcast state pattern
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


def alerts_runner(backend, parallelism=4, **options):
    return LocalRunner(ThresholdAlerts(), key_selector=lambda row: row["sensor"], parallelism=parallelism,
                       max_parallelism=64, state_backend=BACKENDS[backend](), **options)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_thresholds_broadcast_mid_run_apply_to_every_subtask_across_rescales_and_a_backend_switch(backend):
    readings, rules = sensor_epochs()
    expected = recompute_alerts(readings, rules)
    run = alerts_runner(backend)
    for number, (epoch_readings, epoch_rules) in enumerate(zip(readings, rules)):
        if number == 1:
            run.rescale(3)
        if number == 3:
            run.rescale(8)
        if number == 4:  # the broadcast map and the last readings move to another backend
            switched = alerts_runner(SWITCH[backend], parallelism=2, job_id="switched")
            switched.restore_from(run.savepoint(), run.streams)
            run = switched
        assert_same_rows(run.run_epoch(epoch_readings, broadcast=epoch_rules), expected[number],
                         f"{backend}, epoch {number + 1}")
    assert sum(1 for rows in expected for row in rows if row[0] == "recheck") >= 3
    operator = run.latest_metadata().operator("keyed-process")
    maps = [_broadcast_map(run, subtask.operator) for subtask in operator.subtasks]
    assert len(maps) == 2 and maps[0] == maps[1] == {"temp": 95, "pressure": 10, "humidity": 70}, \
        "every subtask holds the same broadcast map"


def _broadcast_map(run, handle):
    """The thresholds a subtask's operator state handle holds."""
    from statekit.backends.common.operator_state import DefaultOperatorStateBackend
    from statekit.spi.backend import OperatorBackendParams, SubtaskInfo

    backend = DefaultOperatorStateBackend(OperatorBackendParams(SubtaskInfo(run.job_id, "keyed-process", 0, 1, 64),
                                                                (handle,), run.streams))
    return dict(backend.get_broadcast_state("thresholds").items())


def test_broadcast_state_is_read_only_while_keyed_rows_are_processed():
    class Writes(ThresholdAlerts):
        def process(self, reading, ctx):
            ctx.broadcast_state(THRESHOLDS).put("x", 1)

    run = LocalRunner(Writes(), key_selector=lambda row: row["sensor"])
    with pytest.raises(StateAccessError, match="read-only while keyed rows are processed"):
        run.run_epoch([{"sensor": "a", "type": "temp", "value": 1}])


def test_each_function_kind_names_the_entry_point_it_needs():
    from statekit.testing import KeyedHarness

    with pytest.raises(ConfigurationError, match="KeyedCoProcessFunction, which takes two inputs"):
        KeyedHarness(UnpaidOrders(), key_selector=lambda row: row["order_id"])

    class Echo(KeyedProcessFunction):
        def process(self, row, ctx):
            yield row

    with pytest.raises(ConfigurationError, match="broadcast rows are for a KeyedBroadcastProcessFunction"):
        LocalRunner(Echo(), key_selector=lambda row: row).run_epoch([1], broadcast=[2])
