"""The window operator's vectorized path (``windows.batch``: batches assigned to windows and
aggregated with Arrow) against its per-row path on the same random input, on every backend: the
same output epoch by epoch, the same late rows, the same state and pending timers in the final
checkpoint, through late rows within and beyond the allowed lateness, sessions that merge with
state and bridge each other, a rescale and a backend switch; every ready-made aggregate, nulls
included (on the heap); processing-time windows; and what makes the operator refuse
``vectorized=True``."""
from __future__ import annotations

import random
import shutil
import tempfile

import pytest

from statekit import windows
from statekit.backends.heap import HeapStateBackend
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.compare import assert_same_rows
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.registry import storage_class
from statekit.runtime.local_runner import LocalRunner
from statekit.spi import ConfigurationError
from statekit.windows import WindowOperator

T0 = 1_700_000_000_000
SECOND = 1000

ASSIGNERS = {
    "tumbling": lambda: windows.TumblingWindows.of("4 seconds", offset="1 second"),
    "sliding": lambda: windows.SlidingWindows.of("6 seconds", "2 seconds"),
    "session": lambda: windows.SessionWindows.with_gap("1500 ms"),
}


@pytest.fixture(params=["heap", "rocksdb", "lmdb"])
def make_backend(request, tmp_path):
    counter = iter(range(1000))

    def make():
        where = str(tmp_path / f"{request.param}-{next(counter)}")
        return {"heap": lambda: HeapStateBackend(),
                "rocksdb": lambda: RocksDBStateBackend(**{"local-dir": where}),
                "lmdb": lambda: LMDBStateBackend(**{"local-dir": where, "map-size": "64k"})}[request.param]()
    return make


@pytest.fixture
def paths_taken(monkeypatch):
    """How many (key, window) accumulators the batch path merged, and how many rows went row by row."""
    taken = {"batch": 0, "row": 0}
    apply, process = WindowOperator._apply_batch_plan, WindowOperator.process

    def counted_apply(self, plan, *args):
        taken["batch"] += len(plan.keys)
        return apply(self, plan, *args)

    def counted_process(self, row, ctx):
        taken["row"] += 1
        return process(self, row, ctx)

    monkeypatch.setattr(WindowOperator, "_apply_batch_plan", counted_apply)
    monkeypatch.setattr(WindowOperator, "process", counted_process)
    return taken


def random_epochs(seed: int, n_epochs: int = 8, per_epoch: int = 300, keys: int = 40) -> list[list[dict]]:
    """Rows moving forward in time, a share of them behind the watermark (late within the allowed
    lateness, or beyond it), some values null, then rows far later that close every window."""
    rng = random.Random(seed)
    epochs = []
    for epoch in range(n_epochs):
        rows = []
        for _ in range(per_epoch):
            behind = rng.random() < 0.03
            ts = T0 + epoch * 5 * SECOND + (rng.randrange(-20 * SECOND, 0) if behind else rng.randrange(5 * SECOND))
            rows.append({"k": f"k{rng.randrange(keys)}", "ts": ts,
                         "v": None if rng.random() < 0.05 else rng.randrange(-50, 100)})
        epochs.append(rows)
    return epochs + [[{"k": "k0", "ts": T0 + 10_000 * SECOND, "v": 1}]] * 2


def run_job(assigner: str, aggregate: windows.VectorizedAggregate, epochs: list[list[dict]], make_backend,
            vectorized: bool, late_rows: str = "side_output", lateness: str = "3 seconds") -> tuple[list, list, list]:
    """Each epoch's output and late rows, and the final checkpoint's state (every cell, timers
    included), with a rescale 2 -> 3 after the third epoch and a switch to another backend instance
    through a savepoint after the fifth."""
    def runner(parallelism: int, directory: str) -> LocalRunner:
        function = windows.aggregate(ASSIGNERS[assigner](), aggregate, timestamp="ts", value="v",
                                     allowed_lateness=lateness, vectorized=vectorized)
        assert function.processes_groups is vectorized
        return LocalRunner(function, lambda row: row["k"], parallelism=parallelism, max_parallelism=32,
                           state_backend=make_backend(), event_time="ts", watermark_delay="2 seconds",
                           late_rows=late_rows, job_id="job",
                           storage=storage_class("filesystem")(f"file://{directory}/checkpoints"))

    where = tempfile.mkdtemp(prefix="windows-")
    run = runner(2, f"{where}/before")
    outputs, late = [], []
    for number, rows in enumerate(epochs):
        if number == 3:
            run.rescale(3)
        if number == 5:
            switched = runner(3, f"{where}/after")
            switched.restore_from(run.savepoint(), run.streams)
            run = switched
        outputs.append(run.run_epoch(rows))
        late.append(list(run.late_output))
    reader = SnapshotReader.open(f"file://{where}/after/checkpoints/job")
    state = sorted((cell.state, repr(cell.key), repr(cell.namespace), repr(cell.user_key), repr(cell.value))
                   for cell in reader.cells(reader.operator(), 0, 1))
    shutil.rmtree(where)
    return outputs, late, state


@pytest.mark.parametrize("assigner", sorted(ASSIGNERS))
def test_the_vectorized_path_matches_the_per_row_path(assigner, make_backend, paths_taken):
    epochs = random_epochs(11)
    aggregate = windows.Sum()
    batched = run_job(assigner, aggregate, epochs, make_backend, vectorized=True)
    assert paths_taken["batch"] > 200 and 0 < paths_taken["row"] < sum(map(len, epochs)) / 3, paths_taken
    by_row = run_job(assigner, aggregate, epochs, make_backend, vectorized=False)
    for number, (got, want) in enumerate(zip(batched[0], by_row[0])):
        assert_same_rows(got, want, f"epoch {number + 1}")
    # the local runner hands a per-row function its rows in input order, a batch grouped by key
    assert [sorted(map(repr, rows)) for rows in batched[1]] == [sorted(map(repr, rows)) for rows in by_row[1]]
    assert sum(map(len, batched[1])) > 5  # late rows were judged, and returned alike
    assert sum(map(len, batched[0])) > 50
    if assigner != "session":  # a session's contents sit in the namespace of a window it merged
        assert batched[2] == by_row[2]


@pytest.mark.parametrize("aggregate", [windows.Count(), windows.Sum(), windows.Min(), windows.Max(), windows.Mean(),
                                       windows.First(), windows.Last()], ids=lambda a: type(a).__name__)
@pytest.mark.parametrize("assigner", sorted(ASSIGNERS))
def test_every_ready_made_aggregate_gives_the_same_windows(assigner, aggregate):
    """On the heap: the backends' part, accumulators in state, is the Sum test's above."""
    epochs = random_epochs(5, n_epochs=5, per_epoch=200)
    make_backend = HeapStateBackend
    if assigner == "session" and aggregate.order_sensitive:
        with pytest.raises(ConfigurationError, match="order of the elements"):
            windows.aggregate(ASSIGNERS[assigner](), aggregate, timestamp="ts", value="v", vectorized=True)
        return
    batched = run_job(assigner, aggregate, epochs, make_backend, vectorized=True, late_rows="drop")
    by_row = run_job(assigner, aggregate, epochs, make_backend, vectorized=False, late_rows="drop")
    for number, (got, want) in enumerate(zip(batched[0], by_row[0])):
        assert_same_rows(got, want, f"epoch {number + 1}")


def test_the_ready_made_aggregates_skip_nulls_as_sql_does():
    values = [3, None, -1, 7, None]
    for aggregate, expected in ((windows.Count(), 5), (windows.Sum(), 9), (windows.Min(), -1), (windows.Max(), 7),
                                (windows.Mean(), 3.0), (windows.First(), 3), (windows.Last(), 7)):
        accumulator = aggregate.create_accumulator()
        for value in values:
            accumulator = aggregate.add(value, accumulator)
        assert aggregate.get_result(accumulator) == expected, type(aggregate).__name__
    for aggregate, expected in ((windows.Sum(), 0), (windows.Min(), None), (windows.Mean(), None),
                                (windows.First(), None)):
        accumulator = aggregate.add(None, aggregate.create_accumulator())
        assert aggregate.get_result(accumulator) == expected, type(aggregate).__name__


@pytest.mark.parametrize("assigner", ["tumbling", "session"])
def test_processing_time_windows_are_vectorized_alike(assigner, make_backend):
    def run(vectorized: bool) -> list:
        made = {"tumbling": windows.TumblingWindows.of("1 minute", domain=windows.TimeDomain.PROCESSING_TIME),
                "session": windows.SessionWindows.with_gap("90 seconds", domain=windows.TimeDomain.PROCESSING_TIME)}
        function = windows.aggregate(made[assigner], windows.Sum(), value="v", vectorized=vectorized)
        times = iter([T0, T0 + 30 * SECOND, T0 + 200 * SECOND, T0 + 500 * SECOND])
        runner = LocalRunner(function, lambda row: row["k"], parallelism=2, state_backend=make_backend(),
                             clock=lambda: next(times))
        rng = random.Random(3)
        return [runner.run_epoch([{"k": rng.randrange(6), "v": rng.randrange(10)} for _ in range(50)])
                for _ in range(4)]

    batched, by_row = run(True), run(False)
    assert sum(map(len, batched)) >= 6
    for number, (got, want) in enumerate(zip(batched, by_row)):
        assert_same_rows(got, want, f"epoch {number + 1}")


def test_rows_that_make_no_columns_go_row_by_row_in_the_local_runner():
    function = windows.aggregate(windows.TumblingWindows.of("1 s"), windows.Count(), timestamp="ts")
    assert function.processes_groups
    run = LocalRunner(function, lambda row: row["k"], parallelism=1, event_time="ts", watermark_delay="0 ms")
    mixed = [{"k": "a", "ts": T0, "tag": 1}, {"k": "a", "ts": T0 + 10, "tag": "one"}]  # no Arrow column of both
    assert run.run_epoch(mixed) == []
    assert run.run_epoch([{"k": "a", "ts": T0 + 5 * SECOND}]) == []
    assert run.run_epoch([]) == [("a", T0, T0 + SECOND, 2)]  # the watermark passed the window


@pytest.mark.parametrize("build, reason", [
    (lambda: windows.aggregate(windows.TumblingWindows.of("1 s"), windows.Sum(), timestamp="ts",
                               value=lambda row: row["v"], vectorized=True), "a function of the row"),
    (lambda: windows.aggregate(windows.TumblingWindows.of("1 s"), windows.Sum(), timestamp="ts", vectorized=True),
     "needs value="),
    (lambda: windows.aggregate(windows.TumblingWindows.of("1 s"), windows.Count(), timestamp=lambda row: row["ts"],
                               vectorized=True), "timestamp= is a function"),
    (lambda: windows.aggregate(windows.TumblingWindows.of("1 s"), windows.Count(), timestamp="ts",
                               trigger=windows.CountTrigger.of(2), vectorized=True), "default trigger"),
    (lambda: windows.aggregate(windows.GlobalWindows.create(), windows.Count(), timestamp="ts",
                               trigger=windows.CountTrigger.of(2), vectorized=True), "GlobalWindows"),
    (lambda: windows.aggregate(windows.SessionWindows.with_gap("1 s"), windows.Last(), timestamp="ts", value="v",
                               vectorized=True), "order of the elements"),
    (lambda: windows.aggregate(windows.SlidingWindows.of("1 s", "5 s"), windows.Count(), timestamp="ts",
                               vectorized=True), "leave gaps"),
])
def test_vectorized_true_is_refused_where_the_operator_cannot_say_why(build, reason):
    with pytest.raises(ConfigurationError, match=reason):
        build()


@pytest.mark.parametrize("vectorized", [True, False])
def test_sessions_that_touch_merge_within_a_batch(vectorized):
    function = windows.aggregate(windows.SessionWindows.with_gap("1 s"), windows.Count(), timestamp="ts",
                                 vectorized=vectorized)
    run = LocalRunner(function, lambda row: row["k"], parallelism=1, event_time="ts", watermark_delay="0 ms")
    touching = [{"k": "a", "ts": T0 + 2 * SECOND}, {"k": "a", "ts": T0}, {"k": "a", "ts": T0 + SECOND},
                {"k": "b", "ts": T0}, {"k": "b", "ts": T0 + SECOND + 1}]
    assert run.run_epoch(touching) == []
    closed = run.run_epoch([{"k": "c", "ts": T0 + 60 * SECOND}]) + run.run_epoch([])
    assert sorted(closed) == [("a", T0, T0 + 3 * SECOND, 3), ("b", T0, T0 + SECOND, 1),
                                         ("b", T0 + SECOND + 1, T0 + 2 * SECOND + 1, 1)]


@pytest.mark.parametrize("vectorized", [True, False])
def test_integer_sums_past_64_bits_and_keys_equal_across_types_are_the_per_row_operators(vectorized, paths_taken):
    function = windows.aggregate(windows.TumblingWindows.of("1 s"), windows.Sum(), timestamp="ts", value="v",
                                 vectorized=vectorized)
    # keys equal in Python but of three types: three keys, as the per-row path keeps them
    run = LocalRunner(function, lambda row: (1, 1.0, True, "big")[row["i"]], parallelism=1, event_time="ts",
                      watermark_delay="0 ms")
    rows = [{"i": 3, "ts": T0, "v": 2 ** 62}, {"i": 3, "ts": T0 + 1, "v": 2 ** 62}, {"i": 0, "ts": T0, "v": 1},
            {"i": 1, "ts": T0, "v": 10}, {"i": 2, "ts": T0, "v": 100}, {"i": 2, "ts": T0 + 2, "v": 1000}]
    closed = run.run_epoch(rows) + run.run_epoch([{"i": 0, "ts": T0 + 60 * SECOND, "v": 0}]) + run.run_epoch([])
    assert sorted(closed, key=repr) == sorted([("big", T0, T0 + SECOND, 2 ** 63), (1, T0, T0 + SECOND, 1),
                                               (1.0, T0, T0 + SECOND, 10), (True, T0, T0 + SECOND, 1100)], key=repr)
    if vectorized:  # the batch whose sum could overflow went row by row, the later ones took the batch path
        assert paths_taken["batch"] > 0 and paths_taken["row"] > 0, paths_taken
