"""The windows library on the local runner, against plain-Python recomputations: tumbling,
sliding and session windows in event time (sessions merging, also when an element bridges two
sessions), allowed lateness (also for a late element that joins a live session), processing-time
windows, a process-window function, windows kept open across a rescale and a backend switch through
a savepoint, and windows and cleanup times at the largest timestamp. Every test runs on both
paths of the operator: batches aggregated with Arrow where it can, and row by row."""
from __future__ import annotations

import datetime
import functools
import random
from collections import defaultdict

import pytest

from statekit import windows
from statekit.backends.heap import HeapStateBackend
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.compare import assert_same_rows
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.registry import storage_class
from statekit.runtime.event_time import EventTime
from statekit.runtime.local_runner import LocalRunner
from statekit.spi import ConfigurationError
from statekit.spi.timers import MAX_TIMESTAMP

T0 = 1_700_000_000_000
SECOND = 1000


Sum = windows.Sum


class Listing(windows.ProcessWindowFunction):
    def process(self, key, window, elements, ctx):
        yield (key, window.start, window.end, sorted(e["v"] for e in elements))


@pytest.fixture(autouse=True, params=["vectorized where it can", "row by row"])
def window_path(request, monkeypatch):
    """Every test on both paths of the window operator: as built (a ready-made aggregate over
    columns aggregates batches with Arrow) and with ``vectorized=False``."""
    if request.param == "row by row":
        monkeypatch.setattr(windows, "aggregate", functools.partial(windows.aggregate, vectorized=False))
    return request.param


@pytest.fixture(params=["heap", "rocksdb", "lmdb"])
def backend(request, tmp_path):
    return {"heap": lambda: HeapStateBackend(),
            "rocksdb": lambda: RocksDBStateBackend(**{"local-dir": str(tmp_path / "rocksdb")}),
            "lmdb": lambda: LMDBStateBackend(**{"local-dir": str(tmp_path / "lmdb"), "map-size": "64k"})
            }[request.param]()


def runner(function, backend, parallelism=2, delay="0 ms", late_rows="drop", clock=None):
    return LocalRunner(function, lambda row: row["k"], parallelism=parallelism, max_parallelism=32,
                       state_backend=backend, event_time="ts", watermark_delay=delay, late_rows=late_rows,
                       clock=clock)


def epochs_of(n_epochs, per_epoch, seed, spread=4 * SECOND, keys=5):
    rng = random.Random(seed)
    return [[{"k": f"k{rng.randrange(keys)}", "ts": T0 + e * 3 * SECOND + rng.randrange(-spread, spread),
              "v": rng.randrange(100)} for _ in range(per_epoch)] for e in range(n_epochs)]


def recompute(epochs, assign, delay_ms=0):
    """Each epoch's expected (key, start, end, sum) rows, by the operator's rules in plain Python:
    epoch N's watermark from epochs < N; a row goes into each of its windows the watermark has not
    passed (a row late for all of them is dropped), even when the row itself is behind the
    watermark; a window is emitted, once, at the end of the first epoch whose watermark passed its
    last millisecond."""
    rule = EventTime(delay_ms)
    properties = None
    contents: dict = defaultdict(list)  # (key, window) -> values
    outputs = []
    for rows in epochs:
        watermark, seen = rule.epoch_start(properties)
        for row in rows:
            seen = max(seen, row["ts"])
            for window in assign(row["ts"]):
                if window[1] - 1 > watermark:
                    contents[(row["k"], window)].append(row["v"])
        closed = sorted(kw for kw in contents if kw[1][1] - 1 <= watermark)
        outputs.append([(key, *window, sum(contents.pop((key, window)))) for key, window in closed])
        properties = {"watermark_ms": watermark, "max_event_time_ms": seen}
    return outputs


def _sessions(contents, gap):
    by_key = defaultdict(list)
    for (key, _), values in contents.items():
        by_key[key].extend(values)
    merged = {}
    for key, values in by_key.items():
        values.sort()
        start, end, bucket = None, None, []
        for ts, v in values:
            if start is not None and ts <= end:
                end = max(end, ts + gap)
                bucket.append((ts, v))
            else:
                if start is not None:
                    merged[(key, (start, end))] = bucket
                start, end, bucket = ts, ts + gap, [(ts, v)]
        merged[(key, (start, end))] = bucket
    return merged


def run_all(run, epochs):
    return [run.run_epoch(rows) for rows in epochs]


def test_tumbling_windows_sum_per_key(backend):
    epochs = epochs_of(10, 80, seed=1) + [[{"k": "k0", "ts": T0 + 60 * SECOND, "v": 0}]] * 2
    function = windows.aggregate(windows.TumblingWindows.of("2 seconds"), Sum(), timestamp="ts",
                                 value="v")
    found = run_all(runner(function, backend), epochs)
    expected = recompute(epochs, lambda ts: [(ts - ts % 2000, ts - ts % 2000 + 2000)])
    for number, (got, want) in enumerate(zip(found, expected)):
        assert_same_rows(got, want, f"epoch {number + 1}")
    assert sum(map(len, found)) > 20


def test_sliding_windows_put_an_element_in_each_of_its_windows(backend):
    epochs = epochs_of(8, 60, seed=2) + [[{"k": "k0", "ts": T0 + 90 * SECOND, "v": 0}]] * 2
    function = windows.aggregate(windows.SlidingWindows.of("3 seconds", "1 second"), Sum(), timestamp="ts",
                                 value="v")

    def assign(ts):
        last = ts - ts % 1000
        return [(start, start + 3000) for start in range(last, ts - 3000, -1000)]

    found = run_all(runner(function, backend, delay="1 second"), epochs)
    for number, (got, want) in enumerate(zip(found, recompute(epochs, assign, delay_ms=1000))):
        assert_same_rows(got, want, f"epoch {number + 1}")


def test_session_windows_merge_and_close_after_the_gap(backend):
    gap = 1500
    epochs = epochs_of(10, 40, seed=3, spread=3 * SECOND, keys=4) + [[{"k": "k0", "ts": T0 + 99 * SECOND, "v": 0}]] * 2
    function = windows.aggregate(windows.SessionWindows.with_gap("1500 ms"), Sum(), timestamp="ts",
                                 value="v")
    found = run_all(runner(function, backend, delay="2 seconds"), epochs)
    # the oracle keeps every key's open sessions as Flink's operator does: a row's window merges with
    # the sessions it touches that the watermark has not closed, and is dropped when the merged
    # session is closed too (a row behind the watermark still joins a live session); the sessions
    # the watermark closed are emitted at the end of the epoch
    rule, properties, sessions, expected = EventTime(2000), None, defaultdict(list), []
    for rows in epochs:
        watermark, seen = rule.epoch_start(properties)
        for row in rows:
            seen = max(seen, row["ts"])
            start, end, total = row["ts"], row["ts"] + gap, row["v"]
            touched = [s for s in sessions[row["k"]] if s[1] - 1 > watermark and s[0] <= end and s[1] >= start]
            for s in touched:
                start, end, total = min(start, s[0]), max(end, s[1]), total + s[2]
            if end - 1 > watermark:
                sessions[row["k"]] = [s for s in sessions[row["k"]] if s not in touched] + [(start, end, total)]
        out = []
        for key in sorted(sessions):
            out += [(key, *s) for s in sorted(sessions[key]) if s[1] - 1 <= watermark]
            sessions[key] = [s for s in sessions[key] if s[1] - 1 > watermark]
        expected.append(out)
        properties = {"watermark_ms": watermark, "max_event_time_ms": seen}
    for number, (got, want) in enumerate(zip(found, expected)):
        assert_same_rows(got, want, f"epoch {number + 1}")
    assert sum(map(len, found)) >= 4


def test_an_element_between_two_sessions_merges_them(backend):
    function = windows.aggregate(windows.SessionWindows.with_gap("10 seconds"), Sum(), timestamp="ts",
                                 value="v")
    run = runner(function, backend, parallelism=1, delay="20 seconds")
    assert run.run_epoch([{"k": "a", "ts": T0, "v": 1}, {"k": "a", "ts": T0 + 15 * SECOND, "v": 2}]) == []
    assert run.run_epoch([{"k": "a", "ts": T0 + 8 * SECOND, "v": 4}]) == []  # bridges [T0, +10) and [+15, +25)
    assert run.run_epoch([{"k": "b", "ts": T0 + 60 * SECOND, "v": 0}]) == []  # moves the watermark
    assert run.run_epoch([]) == [("a", T0, T0 + 25 * SECOND, 7)]


def test_counted_sessions_of_one_key_stay_apart_until_bridged(backend):
    function = windows.aggregate(windows.SessionWindows.with_gap("10 seconds"), windows.Count(), timestamp="ts")
    run = runner(function, backend, parallelism=1, delay="100 seconds")
    assert run.run_epoch([{"k": "a", "ts": T0 + s * SECOND} for s in (0, 15, 30, 60)]) == []  # four sessions of "a"
    assert run.run_epoch([{"k": "a", "ts": T0 + 8 * SECOND}, {"k": "a", "ts": T0 + 22 * SECOND}]) == []  # bridges
    assert run.run_epoch([{"k": "b", "ts": T0 + 300 * SECOND}]) == []  # moves the watermark past every session
    assert sorted(run.run_epoch([])) == [("a", T0, T0 + 40 * SECOND, 5), ("a", T0 + 60 * SECOND, T0 + 70 * SECOND, 1)]


@pytest.mark.parametrize("late_rows", ["drop", "process", "side_output"])
def test_allowed_lateness_updates_a_closed_window_then_drops(backend, late_rows):
    """The window judges lateness, whatever the job's policy: a row behind the watermark whose
    window is within its lateness updates it; one past the lateness is late (counted, dropped or
    in the side output)."""
    function = windows.aggregate(windows.TumblingWindows.of("10 seconds"), Sum(), timestamp="ts",
                                 value="v", allowed_lateness="10 seconds")
    run = runner(function, backend, parallelism=1, late_rows=late_rows)
    run.run_epoch([{"k": "a", "ts": T0 + 1000, "v": 1}])
    run.run_epoch([{"k": "a", "ts": T0 + 12_000, "v": 0}])  # watermark T0 + 1000
    start = T0 - T0 % 10_000
    assert run.run_epoch([]) == [("a", start, start + 10_000, 1)]  # watermark T0 + 12000 closes it
    assert run.run_epoch([{"k": "a", "ts": T0 + 2000, "v": 5}]) == [("a", start, start + 10_000, 6)], \
        "an element late by less than the lateness updates the window's result"
    counted = "late_rows_side_output" if late_rows == "side_output" else "late_rows_dropped"
    assert run.late_output == [] and run.latest_metadata().properties[counted] == 0
    run.run_epoch([{"k": "a", "ts": T0 + 40_000, "v": 0}])
    late = {"k": "a", "ts": T0 + 3000, "v": 100}
    assert run.run_epoch([late]) == [("a", start + 10_000, start + 20_000, 0)], \
        "after the lateness, the window is gone and its late elements are dropped (the next window closes)"
    recorded = run.latest_metadata().properties
    if late_rows == "side_output":
        assert run.late_output == [late] and recorded["late_rows_side_output"] == 1
        assert "late_rows_dropped" not in recorded
    else:
        assert run.late_output == [] and recorded["late_rows_dropped"] == 1


def test_processing_time_windows_close_by_the_epoch_time(backend):
    times = iter(range(T0, T0 + 100 * 60_000, 60_000))
    function = windows.aggregate(windows.TumblingWindows.of("2 minutes", domain=windows.TimeDomain.PROCESSING_TIME),
                                 Sum(), value="v")
    run = LocalRunner(function, lambda row: row["k"], parallelism=2, state_backend=backend, clock=lambda: next(times))
    outputs = [run.run_epoch([{"k": "a", "v": n}, {"k": "b", "v": 10 * n}]) for n in range(1, 6)]
    times_of = [T0 + 60_000 * (n - 1) for n in range(1, 6)]  # epoch n runs at T0 + (n - 1) minutes
    expected = []
    for number, now in enumerate(times_of):
        closed = []  # windows whose last millisecond passed by this epoch's time, not earlier
        for start in sorted({t - t % 120_000 for t in times_of}):
            if now >= start + 119_999 and (number == 0 or times_of[number - 1] < start + 119_999):
                total = sum(n for n, t in enumerate(times_of, 1) if start <= t < start + 120_000 and t <= now)
                closed += [("a", start, start + 120_000, total), ("b", start, start + 120_000, 10 * total)]
        expected.append(closed)
    for number, (got, want) in enumerate(zip(outputs, expected)):
        assert_same_rows(got, want, f"epoch {number + 1}")
    assert sum(map(len, outputs)) == 4


def test_a_process_window_function_gets_every_element(backend):
    function = windows.process(windows.TumblingWindows.of("5 seconds"), Listing(), timestamp="ts")
    run = runner(function, backend)
    start = T0 - T0 % 5000
    run.run_epoch([{"k": "a", "ts": start + 1, "v": 3}, {"k": "a", "ts": start + 2, "v": 1},
                   {"k": "b", "ts": start + 3, "v": 2}])
    assert run.run_epoch([{"k": "c", "ts": start + 9000, "v": 0}]) == []  # the watermark is start + 3
    assert sorted(run.run_epoch([])) == [("a", start, start + 5000, [1, 3]), ("b", start, start + 5000, [2])]


def test_open_windows_survive_a_rescale_and_a_backend_switch(backend, tmp_path):
    epochs = epochs_of(9, 80, seed=4) + [[{"k": "k0", "ts": T0 + 60 * SECOND, "v": 0}]] * 2
    expected = recompute(epochs, lambda ts: [(ts - ts % 4000, ts - ts % 4000 + 4000)], delay_ms=1000)

    def function():
        return windows.aggregate(windows.TumblingWindows.of("4 seconds"), Sum(), timestamp="ts",
                                 value="v")

    heap = runner(function(), HeapStateBackend(), parallelism=3, delay="1 second")
    for number in range(4):
        assert_same_rows(heap.run_epoch(epochs[number]), expected[number], f"heap epoch {number + 1}")
    switched = runner(function(), backend, parallelism=5, delay="1 second")
    switched.restore_from(heap.savepoint(), heap.streams)
    for number in range(4, len(epochs)):
        if number == 7:
            switched.rescale(2)
        assert_same_rows(switched.run_epoch(epochs[number]), expected[number], f"epoch {number + 1} after the switch")


def test_bad_window_settings_are_refused():
    with pytest.raises(ConfigurationError, match="window size must be a positive duration"):
        windows.TumblingWindows.of("0 s")
    with pytest.raises(ConfigurationError, match="event-time windows need timestamp="):
        windows.aggregate(windows.TumblingWindows.of("1 s"), Sum())
    with pytest.raises(ConfigurationError, match="needs an AggregateFunction"):
        windows.aggregate(windows.TumblingWindows.of("1 s"), sum, timestamp="ts")
    with pytest.raises(ConfigurationError, match="allowed_lateness is for event-time windows"):
        windows.aggregate(windows.TumblingWindows.of("1 s", domain=windows.TimeDomain.PROCESSING_TIME), Sum(),
                          allowed_lateness="1 s")


def test_a_window_first_filled_within_the_lateness_is_cleared_after_it(backend, tmp_path):
    function = windows.aggregate(windows.TumblingWindows.of("10 seconds"), windows.Count(), timestamp="ts",
                                 allowed_lateness="10 seconds")
    run = LocalRunner(function, lambda row: row["k"], parallelism=1, state_backend=backend, event_time="ts",
                      watermark_delay="0 ms", late_rows="process",
                      storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"), job_id="job")
    start = T0 - T0 % 10_000
    run.run_epoch([{"k": "a", "ts": start + 15_000}])
    assert run.run_epoch([{"k": "b", "ts": start + 5000}]) == [("b", start, start + 10_000, 1)], \
        "the first element of a window its end passed, within the lateness, fires it at once"
    run.run_epoch([{"k": "a", "ts": start + 100_000}])
    run.run_epoch([])  # the watermark passed the window's end plus the lateness
    reader = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job")
    left = [(cell.key, cell.state, cell.namespace) for cell in reader.cells(reader.operator(), 0, 1)]
    assert [cell for cell in left if cell[0] == "b"] == [], "the window's state outlived its lateness"


def test_a_session_past_its_lateness_merges_with_nothing(backend):
    function = windows.aggregate(windows.SessionWindows.with_gap("10 seconds"), windows.Count(), timestamp="ts",
                                 allowed_lateness="100 seconds")
    run = runner(function, backend, parallelism=1, late_rows="process")
    run.run_epoch([{"k": "a", "ts": T0}, {"k": "x", "ts": T0 + 50_000}])
    assert run.run_epoch([{"k": "a", "ts": T0 + 5000}]) == [("a", T0, T0 + 15_000, 2)], \
        "a late element within the lateness grows the session and fires it"
    run.run_epoch([{"k": "x", "ts": T0 + 120_000}])
    assert sorted(run.run_epoch([{"k": "a", "ts": T0 + 15_000}])) == [
        ("a", T0 + 15_000, T0 + 25_000, 1), ("x", T0 + 50_000, T0 + 60_000, 1)], \
        "the watermark passed [T0, T0 + 15 s) plus its lateness: it is gone, a new session starts"


def test_a_session_the_watermark_closed_does_not_grow_in_that_epoch(backend):
    function = windows.aggregate(windows.SessionWindows.with_gap("10 seconds"), windows.Count(), timestamp="ts")
    run = runner(function, backend, parallelism=1)
    run.run_epoch([{"k": "a", "ts": T0}, {"k": "x", "ts": T0 + 9999}])
    # the watermark T0 + 9999 closes [T0, T0 + 10 s); an element at its end opens the next session
    assert run.run_epoch([{"k": "a", "ts": T0 + 10_000}]) == [("a", T0, T0 + 10_000, 1)]
    assert run.run_epoch([{"k": "x", "ts": T0 + 60_000}]) == []
    assert sorted(run.run_epoch([])) == [("a", T0 + 10_000, T0 + 20_000, 1), ("x", T0 + 9999, T0 + 19_999, 1)]


@pytest.mark.parametrize("assigner", [windows.TumblingWindows.of("10 seconds"),
                                      windows.SessionWindows.with_gap("10 seconds")], ids=["tumbling", "session"])
def test_a_late_element_fires_its_window_once_in_the_epoch_its_end_passes(backend, assigner):
    function = windows.aggregate(assigner, windows.Count(), timestamp="ts", allowed_lateness="10 seconds")
    run = runner(function, backend, parallelism=1, late_rows="process")
    start = T0 - T0 % 10_000
    run.run_epoch([{"k": "a", "ts": start}])  # the window (or session) [start, start + 10 s)
    run.run_epoch([{"k": "x", "ts": start + 12_000}])  # the watermark is start
    # the watermark start + 12000 passes the window's end: a late element fires it at once, with
    # both elements, and its end timer, due at the end of this epoch, does not fire it again
    assert run.run_epoch([{"k": "a", "ts": start}]) == [("a", start, start + 10_000, 2)]
    assert run.run_epoch([{"k": "a", "ts": start}]) == [("a", start, start + 10_000, 3)]


def test_a_row_at_the_watermark_is_late(backend):
    """A watermark w says no more rows of time w or earlier are expected (Spark's and Flink's rule):
    a row at exactly the watermark is late, counted and dropped by the runner. It was on time for
    the runners, while the window operator dropped it without a count (its window's last
    millisecond is the watermark)."""
    function = windows.aggregate(windows.TumblingWindows.of("10 seconds"), windows.Count(), timestamp="ts")
    run = runner(function, backend, parallelism=1)
    start = T0 - T0 % 10_000
    run.run_epoch([{"k": "x", "ts": start + 9999}])
    out = run.run_epoch([{"k": "a", "ts": start + 9999}])  # the watermark is start + 9999: the row is late
    assert run.latest_metadata().properties["late_rows_dropped"] == 1
    assert out == [("x", start, start + 10_000, 1)]


def test_a_late_element_joins_the_live_session_it_merges_with(backend):
    """Flink's WindowOperatorTest scenario (gap 3 s, lateness 10 ms): the element at 10000 comes
    when the watermark is 14600, so its own window [10000, 13000) is past its lateness, but it
    touches the live session [11600, 14600) (lateness until 14609): Flink merges first and tests
    the merged window for lateness, keeps the element and fires [10000, 14600) at once. The
    operator tested the element's own window and dropped it. "x" only moves the watermark."""
    function = windows.aggregate(windows.SessionWindows.with_gap("3 s"), windows.Count(), timestamp="ts",
                                 allowed_lateness="10 ms")
    run = runner(function, backend, parallelism=1, late_rows="process")

    def rows(key, *stamps):
        return [{"k": key, "ts": ts} for ts in stamps]

    epochs = [  # each epoch's watermark is the largest event time of the epochs before it
        (rows("a", 1000) + rows("x", 1999), []),
        (rows("a", 2000) + rows("x", 4998), []),  # watermark 1999
        (rows("a", 4500) + rows("x", 7400), []),  # 4998
        (rows("a", 8500, 7000) + rows("x", 11501), []),  # 7400: 7000 bridges [1000, 7500) and [8500, 11500)
        (rows("a", 11600) + rows("x", 14600), [("a", 1000, 11500, 5), ("x", 1999, 10400, 3)]),  # 11501
        ([], [("a", 11600, 14600, 1), ("x", 11501, 14501, 1)]),  # 14600
        (rows("a", 10000, 14500) + rows("x", 20000), [("a", 10000, 14600, 2)]),  # 14600: fires at once
        (rows("x", 100_000), [("a", 10000, 17500, 3), ("x", 14600, 17600, 1)]),  # 20000
        ([], [("x", 20000, 23000, 1)]),  # 100000
    ]
    for number, (records, expected) in enumerate(epochs, 1):
        assert_same_rows(run.run_epoch(records), expected, f"epoch {number}")


MAX = MAX_TIMESTAMP


def test_a_window_at_the_largest_timestamp_fires_and_is_cleaned_up(backend, tmp_path):
    """Tumbling 1 s windows with 2 s of lateness and an element at 2**63 - 1750: its window ends
    at MAX - 807 and its cleanup time, end plus lateness, passes the largest timestamp, so it
    saturates at MAX (Flink's cleanupTime). It overflowed and registering its timer failed."""
    function = windows.aggregate(windows.TumblingWindows.of("1 s"), windows.Count(), timestamp="ts",
                                 allowed_lateness="2 s")
    run = LocalRunner(function, lambda row: row["k"], parallelism=1, max_parallelism=32, state_backend=backend,
                      event_time="ts", watermark_delay="0 ms", late_rows="process",
                      storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"), job_id="job")
    element = 2**63 - 1750
    start, end = MAX - 1807, MAX - 807
    assert run.run_epoch([{"k": "a", "ts": element}]) == []
    assert run.run_epoch([{"k": "x", "ts": end - 1}]) == []  # the watermark is the element
    assert sorted(run.run_epoch([])) == [("a", start, end, 1), ("x", start, end, 1)], \
        "the watermark reached the window's last millisecond"
    assert run.run_epoch([{"k": "a", "ts": element + 1}]) == [("a", start, end, 2)], \
        "late within the lateness (until the largest timestamp): fires at once"
    assert run.run_epoch([{"k": "x", "ts": MAX}]) == []

    def cells():
        reader = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job")
        return list(reader.cells(reader.operator(), 0, 1))

    assert [(cell.namespace, cell.user_key) for cell in cells() if cell.key == "a" and cell.kind == "timers"] == [
        (windows.TimeWindow(start, end), MAX)], "the window's one timer left is its cleanup, at the largest timestamp"
    assert run.run_epoch([]) == [("x", end, MAX, 1)], "the last window stops at the largest timestamp"
    assert run.run_epoch([{"k": "a", "ts": element + 2}]) == [], "the watermark MAX ended the lateness"
    assert cells() == [], "the cleanup timers at the largest timestamp fired and cleared every window"


@pytest.mark.parametrize("assigner, expected", [
    (windows.TumblingWindows.of("1 s"), [("a", MAX - 1807, MAX - 807, 1), ("a", MAX - 807, MAX, 1)]),
    (windows.SlidingWindows.of("2 s", "1 s"),
     [("a", MAX - 2807, MAX - 807, 1), ("a", MAX - 1807, MAX, 2), ("a", MAX - 807, MAX, 1)]),
    (windows.SessionWindows.with_gap("3 s"), [("a", MAX - 1750, MAX, 2)]),
], ids=["tumbling", "sliding", "session"])
def test_windows_near_the_largest_timestamp_stop_at_it(backend, assigner, expected):
    """Window ends past 2**63 - 1 (start + size, timestamp + gap) do not fit a timer: they stop at
    the largest timestamp, and the watermark MAX fires them."""
    function = windows.aggregate(assigner, windows.Count(), timestamp="ts", allowed_lateness="2 s")
    run = runner(function, backend, parallelism=1)
    assert run.run_epoch([{"k": "a", "ts": MAX - 1750}]) == []
    assert run.run_epoch([{"k": "a", "ts": MAX}]) == []
    assert sorted(run.run_epoch([])) == expected


@pytest.mark.parametrize("build, named", [
    (lambda: windows.TumblingWindows.of("200000000000 days"), "TumblingWindows: the window size"),
    (lambda: windows.TumblingWindows.of("1 s", offset="200000000000 days"), "TumblingWindows: the window offset"),
    (lambda: windows.SlidingWindows.of("1 s", "200000000000 days"), "SlidingWindows: the window slide"),
    (lambda: windows.SessionWindows.with_gap("200000000000 days"), "SessionWindows: the session gap"),
    (lambda: windows.aggregate(windows.TumblingWindows.of("1 s"), Sum(), timestamp="ts",
                               allowed_lateness="200000000000 days"), "allowed_lateness"),
], ids=["size", "offset", "slide", "gap", "lateness"])
def test_a_duration_beyond_the_largest_timestamp_is_refused(build, named):
    with pytest.raises(ConfigurationError) as refused:
        build()
    message = str(refused.value)
    assert named in message and "'200000000000 days'" in message and str(MAX_TIMESTAMP) in message, message


def _java_remainder(a: int, b: int) -> int:
    """Java's ``a % b`` (truncated: the sign of ``a``), not Python's (floored)."""
    return abs(a) % abs(b) * (1 if a >= 0 else -1)


def _flink_window_start(timestamp: int, offset: int, size: int) -> int:
    """Flink's ``TimeWindow.getWindowStartWithOffset``."""
    remainder = _java_remainder(timestamp - offset, size)
    return timestamp - (remainder + size) if remainder < 0 else timestamp - remainder


@pytest.mark.parametrize("size", [7, 10, 1000])
def test_window_starts_with_negative_and_positive_offsets_are_flinks(size):
    """Flink allows offsets with abs(offset) < size, negative ones too (e.g. -8 hours for days in
    UTC+8); the starts are Flink's, and, where its argument is not negative, the formula
    ``timestamp - (timestamp - offset + size) % size`` of Flink's documentation."""
    timestamps = [*range(-3 * size, 3 * size), T0, T0 + 1, -T0, MAX_TIMESTAMP - 5 * size]
    for offset in sorted({-size + 1, -size // 2, -1, 0, 1, size // 2, size - 1}):
        tumbling = windows.TumblingWindows.of(f"{size} ms", offset=f"{offset} ms")
        sliding = windows.SlidingWindows(3 * size, size, offset)
        for ts in timestamps:
            start = _flink_window_start(ts, offset, size)
            assert tumbling.assign(ts) == [windows.TimeWindow(start, start + size)], (ts, offset)
            if ts - offset + size >= 0:
                assert start == ts - _java_remainder(ts - offset + size, size)
            assert start <= ts < start + size and (start - offset) % size == 0
            assert sliding.assign(ts) == [windows.TimeWindow(s, s + 3 * size) for s in (start, start - size,
                                                                                        start - 2 * size)]


def test_a_negative_offset_shifts_days_to_a_time_zone():
    from datetime import timedelta

    days_in_utc8 = windows.TumblingWindows.of("1 day", offset=timedelta(hours=-8))
    assert days_in_utc8 == windows.TumblingWindows.of("1 day", offset="-8 hours")
    day = 86_400_000
    midnight_utc8 = 19_000 * day - 8 * 3_600_000
    assert days_in_utc8.assign(midnight_utc8 + 5) == [windows.TimeWindow(midnight_utc8, midnight_utc8 + day)]


@pytest.mark.parametrize("build, named", [
    (lambda: windows.TumblingWindows.of("1 s", offset="1 s"), "the window size (1000 ms)"),
    (lambda: windows.TumblingWindows.of("1 s", offset="-1 s"), "the window size (1000 ms)"),
    (lambda: windows.TumblingWindows(1000, 5000), "the window size (1000 ms)"),
    (lambda: windows.SlidingWindows.of("10 s", "2 s", offset="-3 s"), "the window slide (2000 ms)"),
])
def test_an_offset_not_shorter_than_the_period_is_refused_as_in_flink(build, named):
    with pytest.raises(ConfigurationError, match="the window offset must be shorter than") as refused:
        build()
    assert named in str(refused.value)


def test_other_durations_stay_non_negative():
    with pytest.raises(ConfigurationError, match="the window size must not be negative"):
        windows.TumblingWindows.of("-1 s")
    with pytest.raises(ConfigurationError, match="allowed_lateness must not be negative"):
        windows.aggregate(windows.TumblingWindows.of("1 s"), Sum(), timestamp="ts", allowed_lateness="-1 s")


def test_end_of_input_emits_every_session_of_a_bounded_input_in_one_epoch(backend):
    """A sessionization over a finished input: with ``end_of_input`` the one epoch emits every
    session (the watermark moves to the largest timestamp after the rows), where without it the
    last sessions waited for later epochs; the checkpoint records that watermark, so a later epoch
    finds every row late."""
    rng = random.Random(7)
    rows = [{"k": f"k{rng.randrange(6)}", "ts": T0 + rng.randrange(120 * SECOND), "v": rng.randrange(100)}
            for _ in range(400)]
    rng.shuffle(rows)
    sessions = windows.aggregate(windows.SessionWindows.with_gap("3 seconds"), Sum(), timestamp="ts",
                                 value="v")
    expected = [(key, start, end, sum(v for _, v in values))
                for (key, (start, end)), values in _sessions({(row["k"], i): [(row["ts"], row["v"])]
                                                             for i, row in enumerate(rows)}, 3000).items()]
    assert runner(sessions, backend, delay="1 minute").run_epoch(rows) == []
    run = runner(sessions, backend, delay="1 minute")
    assert_same_rows(run.run_epoch(rows, end_of_input=True), expected, "every session, in one epoch")
    recorded = run.latest_metadata().properties
    assert recorded["watermark_ms"] == MAX_TIMESTAMP and recorded["late_rows_dropped"] == 0
    assert run.run_epoch([{"k": "k0", "ts": T0, "v": 1}]) == []
    assert run.latest_metadata().properties["late_rows_dropped"] == 1


def test_end_of_input_fires_event_time_timers_of_a_job_without_event_time(backend):
    """A job that registers event-time timers but reads no event time (its watermark never moves)
    gets them fired at the end of its input, as Flink's end of a bounded input does."""
    from statekit import KeyedProcessFunction

    class RemindAtTime(KeyedProcessFunction):
        def process(self, row, ctx):
            ctx.timer_service().register_event_time_timer(row["ts"])

        def on_timer(self, timestamp, ctx):
            yield ctx.current_key, timestamp, ctx.timer_service().current_watermark()

    run = LocalRunner(RemindAtTime(), lambda row: row["k"], parallelism=2, max_parallelism=32, state_backend=backend)
    assert run.run_epoch([{"k": "a", "ts": 5}, {"k": "b", "ts": 7}]) == []
    assert sorted(run.run_epoch([{"k": "a", "ts": 9}], end_of_input=True)) == [
        ("a", 5, MAX_TIMESTAMP), ("a", 9, MAX_TIMESTAMP), ("b", 7, MAX_TIMESTAMP)]


def test_sessions_with_a_gap_per_element_match_a_recomputation(backend):
    """``SessionWindows.with_dynamic_gap``: each element opens ``[t, t + its gap)`` (a gap as
    milliseconds, text or a timedelta), and sessions merge where these intersect."""
    import datetime

    rng = random.Random(11)
    gaps = [500, "2 seconds", datetime.timedelta(seconds=1)]
    rows = [{"k": f"k{rng.randrange(4)}", "ts": T0 + rng.randrange(60 * SECOND), "v": rng.randrange(10),
             "gap": rng.choice(gaps)} for _ in range(300)]
    gap_ms = {500: 500, "2 seconds": 2000, datetime.timedelta(seconds=1): 1000}
    expected = []
    for key in sorted({row["k"] for row in rows}):
        session = None
        for row in sorted((row for row in rows if row["k"] == key), key=lambda row: row["ts"]):
            start, end = row["ts"], row["ts"] + gap_ms[row["gap"]]
            if session is not None and start <= session[1]:
                session = [session[0], max(session[1], end), session[2] + row["v"]]
                continue
            if session is not None:
                expected.append((key, *session))
            session = [start, end, row["v"]]
        expected.append((key, *session))
    function = windows.aggregate(windows.SessionWindows.with_dynamic_gap(lambda row: row["gap"]), Sum(),
                                 timestamp="ts", value="v")
    run = runner(function, backend, delay="1 minute")
    half = len(rows) // 2
    assert run.run_epoch(rows[:half]) == []
    assert_same_rows(run.run_epoch(rows[half:], end_of_input=True), expected, "sessions of dynamic gaps")


def test_a_bad_dynamic_gap_names_the_element():
    function = windows.aggregate(windows.SessionWindows.with_dynamic_gap(lambda row: row["gap"]), Sum(),
                                 timestamp="ts", value="v")
    run = runner(function, HeapStateBackend(), delay="1 minute")
    with pytest.raises(ConfigurationError, match=r"gap must be a positive duration, got -5 ms, for \{.*'gap': -5"):
        run.run_epoch([{"k": "a", "ts": T0, "v": 1, "gap": -5}])


@pytest.mark.parametrize("zone", [datetime.timezone.utc, None], ids=["timestamp", "timestamp_ntz"])
def test_windows_over_datetime_event_times_start_and_end_at_datetimes_in_the_local_runner(backend, zone):
    """As under Spark for a TIMESTAMP (or TIMESTAMP_NTZ) column: records whose event times are aware
    (or naive) datetimes get window bounds of that kind, also from an epoch without records (the
    type is recorded with the checkpoint); a ProcessWindowFunction gets them with window.bounds."""

    class Bounds(windows.ProcessWindowFunction):
        def process(self, key, window, elements, ctx):
            yield (key, *window.bounds(ctx.time.event_time_type), len(elements))

    base = datetime.datetime(2024, 3, 1, 9, 0, tzinfo=zone)
    rows = [{"k": "a", "ts": base + datetime.timedelta(seconds=s)} for s in (1, 4, 12)]
    for function in (windows.aggregate(windows.TumblingWindows.of("10 seconds"), windows.Count(), timestamp="ts"),
                     windows.process(windows.TumblingWindows.of("10 seconds"), Bounds(), timestamp="ts")):
        run = runner(function, backend, parallelism=1)
        assert run.run_epoch(rows) == []
        assert run.run_epoch([]) == [("a", base, base + datetime.timedelta(seconds=10), 2)]
        assert run.latest_metadata().properties["event_time_type"] == ("timestamp" if zone else "timestamp_ntz")
        assert run.run_epoch([], end_of_input=True) == [("a", base + datetime.timedelta(seconds=10),
                                                          base + datetime.timedelta(seconds=20), 1)]
