"""Two inputs on the local runner, on every backend: connected keyed inputs (orders and payments
joined by order id, with a timer alert for unpaid orders) and the broadcast state pattern
(thresholds per sensor type as a broadcast input that changes mid-run), each checked against a
plain-Python recomputation across rescales 4 -> 3 -> 8 and a backend switch through a savepoint;
the watermark of two inputs (the smaller of theirs); and the function kinds each entry takes."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statekit import KeyedCoProcessFunction, StateTtlConfig, TtlTimeCharacteristic, ValueStateDescriptor
from statekit.backends.heap import HeapStateBackend
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.compare import assert_same_rows
from statekit.runtime import LocalRunner
from statekit.runtime.event_time import INPUT_EVENT_TIMES, WATERMARK
from statekit.runtime.function import KeyedProcessFunction
from statekit.spi import ConfigurationError, StateAccessError
from statekit.spi.timers import MIN_TIMESTAMP

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from two_input_pipelines import (  # noqa: E402
    MINUTE, T0, THRESHOLDS, ThresholdAlerts, UnpaidOrders, order_epochs, recompute_alerts, recompute_orders,
    sensor_epochs,
)
BACKENDS = {"heap": HeapStateBackend, "rocksdb": RocksDBStateBackend, "lmdb": LMDBStateBackend}
#: each backend's run switches to the next one through a savepoint
SWITCH = {"heap": "rocksdb", "rocksdb": "lmdb", "lmdb": "heap"}


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


class RecentPayers(KeyedCoProcessFunction):
    """A payment (right) marks its customer for 10 minutes of event time (event-time TTL); an order
    (left) of a marked customer says so."""

    SEEN = ValueStateDescriptor("paid-recently", ttl=StateTtlConfig(
        600, time_characteristic=TtlTimeCharacteristic.EVENT_TIME))

    def open(self, ctx):
        self.seen = ctx.get_state(self.SEEN)

    def process_left(self, order, ctx):
        yield order["customer"], order["ts"], self.seen.value() is not None

    def process_right(self, payment, ctx):
        self.seen.update(payment["ts"])


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_event_time_ttl_of_a_co_function_expires_by_the_watermark_of_both_inputs(backend):
    """The write time of a state entry is the event time of the row of whichever input wrote it, and
    it expires when the watermark of two inputs passes it plus the TTL."""
    run = LocalRunner(RecentPayers(), key_selector=lambda row: row["customer"], parallelism=2,
                      state_backend=BACKENDS[backend](), event_time="ts", watermark_delay="0 ms")
    run.run_epoch([("right", {"customer": "c", "ts": T0}), ("left", {"customer": "x", "ts": T0})])
    assert run.run_epoch([("left", {"customer": "c", "ts": T0 + 9 * MINUTE})]) == [("c", T0 + 9 * MINUTE, True)]
    run.run_epoch([("right", {"customer": "y", "ts": T0 + 11 * MINUTE})])  # payments' watermark at T0 + 9 min
    run.run_epoch([("left", {"customer": "x", "ts": T0 + 11 * MINUTE})])  # both inputs at T0 + 11 min
    assert run.run_epoch([("left", {"customer": "c", "ts": T0 + 12 * MINUTE})]) == [("c", T0 + 12 * MINUTE, False)], \
        "the watermark of both inputs (T0 + 11 min) passed T0 + 10 min: the entry expired"
