"""The joins library (``statekit.joins``) on the local runner, on every backend: the interval join
of impressions and clicks against a brute-force recomputation, inner and outer, with negative,
zero and positive bounds, across a rescale and a backend switch, its buffers empty once the
watermark passed them; window joins of tumbling and session windows (sessions bridged by the other
input's rows) step by step in the test harness; and their errors."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statekit import joins, windows
from statekit.registry import storage_class
from statekit.backends.heap import HeapStateBackend
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.compare import assert_same_rows
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.runtime import KeyedProcessFunction, LocalRunner
from statekit.spi import ConfigurationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from two_input_pipelines import ad_epochs, click_pair, recompute_interval_join  # noqa: E402

BACKENDS = {"heap": HeapStateBackend, "rocksdb": RocksDBStateBackend, "lmdb": LMDBStateBackend}
SWITCH = {"heap": "rocksdb", "rocksdb": "lmdb", "lmdb": "heap"}


def join_runner(function, backend, parallelism=3, **options):
    return LocalRunner(function, key_selector=lambda row: row["ad"], parallelism=parallelism, max_parallelism=32,
                       state_backend=BACKENDS[backend](), event_time="ts", watermark_delay="30 seconds", **options)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("how,lower,upper", [("inner", "0 s", "60 s"), ("left_outer", "-10 s", "30 s"),
                                             ("right_outer", "0 ms", "0 ms"), ("full_outer", "5 s", "90 s")])
def test_interval_join_matches_the_brute_force_recomputation(backend, how, lower, upper, tmp_path):
    epochs = ad_epochs()
    lower_ms, upper_ms = (int(b.split()[0]) * (1000 if b.endswith(" s") else 1) for b in (lower, upper))
    expected = [[click_pair(*pair) for pair in out] for out in recompute_interval_join(epochs, lower_ms, upper_ms, how)]
    function = joins.interval_join("ts", lower, upper, how=how, join=click_pair)
    run = join_runner(function, backend)
    for number, records in enumerate(epochs):
        if number == 3:
            run.rescale(5)
        if number == 5:  # open buffers and their cleanup timers move to another backend
            switched = join_runner(joins.interval_join("ts", lower, upper, how=how, join=click_pair),
                                   SWITCH[backend], parallelism=2, job_id="switched",
                                   storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"))
            switched.restore_from(run.savepoint(), run.streams)
            run = switched
        assert_same_rows(run.run_epoch(records), expected[number], f"{backend} {how}, epoch {number + 1}")
    found = [pair for out in expected for pair in out]
    if upper_ms - lower_ms >= 30_000:
        assert sum(1 for left, right in found if left and right) >= 10
    if how != "inner":
        assert any(left is None or right is None for left, right in found)
    reader = SnapshotReader.open(f"file://{tmp_path}/checkpoints/switched")
    leftover = [(cell.key, cell.state) for index in range(2) for cell in reader.cells(reader.operator(), index, 2)
                if cell.state.startswith("interval-join-") and cell.key != "closing"]
    assert leftover == [], "every row's buffer entry went when the watermark passed it"


def test_interval_join_bounds_and_time_are_checked():
    with pytest.raises(ConfigurationError, match="lower bound .* is after its upper bound"):
        joins.interval_join("ts", "1 minute", "0 s")
    with pytest.raises(ConfigurationError, match="needs time="):
        joins.interval_join({"left": "ts", "right": None}, "0 s", "1 s")
    with pytest.raises(ConfigurationError, match="how= must be one of"):
        joins.interval_join("ts", "0 s", "1 s", how="outer")


def _element(side, key, ts):
    return {"k": key, "ts": ts, "side": side}


def _pair(left, right):
    return (left["ts"] if left else None, right["ts"] if right else None)


class TwoInputSteps:
    """A window join stepped in the harness: each row goes to process_left or process_right."""

    def __init__(self, function, backend):
        from statekit.testing import KeyedHarness

        self.harness = KeyedHarness(_ByTag(function), key_selector=lambda row: row["k"],
                                    state_backend=BACKENDS[backend]())

    def rows(self, *rows):
        for side, key, ts in rows:
            self.harness.process_element(_element(side, key, ts))
        return self

    def watermark(self, watermark_ms):
        self.harness.process_watermark(watermark_ms)
        return sorted(self.harness.take_output(), key=repr)


class _ByTag(KeyedProcessFunction):
    """A co-function as a one-input function for the harness: each row's tag says its input."""

    def __init__(self, function):
        self.function = function
        self.judges_lateness = function.judges_lateness

    def open(self, ctx):
        self.function.open(ctx)

    def process(self, row, ctx):
        return (self.function.process_left if row["side"] == "left" else self.function.process_right)(row, ctx)

    def on_timer(self, timestamp, ctx):
        return self.function.on_timer(timestamp, ctx)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("how,expected", [
    ("inner", [("a", 1000, 3000), ("a", 5000, 3000)]),
    ("left_outer", [("a", 1000, 3000), ("a", 5000, 3000), ("b", 2000, None)]),
    ("full_outer", [("a", 1000, 3000), ("a", 5000, 3000), ("b", 2000, None), ("c", None, 4000)]),
])
def test_a_tumbling_window_join_pairs_the_rows_of_each_window(backend, how, expected):
    join = joins.window_join(windows.TumblingWindows.of("10 seconds"), time="ts", how=how,
                             join=lambda left, right: ((left or right)["k"], *_pair(left, right)))
    steps = TwoInputSteps(join, backend)
    steps.rows(("left", "a", 1000), ("left", "a", 5000), ("right", "a", 3000), ("left", "b", 2000),
               ("right", "c", 4000), ("right", "a", 12_000))
    assert steps.watermark(9998) == []
    assert steps.watermark(9999) == sorted(expected, key=repr)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_session_window_join_merges_sessions_the_other_input_bridges(backend):
    """Sessions of 5 s: a left row at 0 and a right row at 8000 are two sessions until a left row
    at 4000 bridges them; the one session [0, 13000) pairs both left rows with the right one."""
    join = joins.window_join(windows.SessionWindows.with_gap("5 seconds"), time="ts", how="full_outer",
                             join=lambda left, right: _pair(left, right))
    steps = TwoInputSteps(join, backend)
    steps.rows(("left", "a", 0), ("right", "a", 8000))
    assert steps.rows(("left", "a", 4000)).watermark(12_998) == []
    assert steps.watermark(12_999) == [(0, 8000), (4000, 8000)]
    steps.rows(("right", "a", 20_000))
    assert steps.watermark(30_000) == [(None, 20_000)], "a session of one input's rows: the outer rows"


def test_window_joins_refuse_an_unknown_join_type_and_event_time_windows_without_time():
    with pytest.raises(ConfigurationError, match="how= must be one of"):
        joins.window_join(windows.TumblingWindows.of("1 minute"), time="ts", how="cross")
    with pytest.raises(ConfigurationError, match="needs time="):
        joins.window_join(windows.TumblingWindows.of("1 minute"))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_sliding_window_join_pairs_the_rows_of_every_window_they_share(backend):
    """Windows of 10 s every 5 s: a left row at 6000 and a right row at 8000 share [0, 10000) and
    [5000, 15000), so their pair comes once per window; a right row at 12000 shares only
    [5000, 15000) with the left row."""
    join = joins.window_join(windows.SlidingWindows.of("10 seconds", "5 seconds"), time="ts",
                             join=lambda left, right: _pair(left, right))
    steps = TwoInputSteps(join, backend)
    steps.rows(("left", "a", 6000), ("right", "a", 8000), ("right", "a", 12_000))
    assert steps.watermark(9999) == [(6000, 8000)]
    assert steps.watermark(14_999) == sorted([(6000, 8000), (6000, 12_000)], key=repr)
    assert steps.watermark(19_999) == [], "[10000, 20000) has no left row"


def test_a_row_without_event_time_pairs_with_nothing():
    """As under Spark, a row whose event time is null is processed: the interval join pairs it with
    nothing, and an outer join emits it at once."""
    run = LocalRunner(joins.interval_join("ts", "0 s", "1 minute", how="left_outer", join=click_pair),
                      key_selector=lambda row: row["ad"], event_time="ts", watermark_delay="0 ms")
    assert run.run_epoch([("right", {"ad": "a", "click_id": "c1", "ts": 1000}),
                          ("left", {"ad": "a", "impression_id": "i1", "ts": None})]) == [("i1", None)]
