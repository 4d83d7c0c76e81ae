"""The local runner: epochs, the exactly-once restore rule, savepoints, retention, bad input."""
import pytest

from statekit.conformance_tests.workload import WorkloadFunction, expected_key_state, make_rows, oracle
from statekit import KeyedProcessFunction
from statekit.runtime import LocalRunner
from statekit.spi import ConfigurationError, RestoreError


def _runner(**kwargs):
    return LocalRunner(WorkloadFunction(), lambda row: row[0], max_parallelism=128, **kwargs)


def _final_counts(outputs):
    counts = {}
    for key, count in outputs:
        counts[key] = max(counts.get(key, 0), count)
    return counts


def test_replayed_epoch_recomputes_the_same_state():
    """Epoch N restores from the latest completed checkpoint with id < N, so a replay of
    epoch 2 (after it already completed once) gives the same result as the first run."""
    rows_1, rows_2 = make_rows(500, 50, 1), make_rows(500, 50, 2)
    runner = _runner(parallelism=2)
    runner.run_epoch(rows_1)
    first = runner.run_epoch(rows_2)
    replay = runner.run_epoch(rows_2, checkpoint_id=2)
    assert sorted(first) == sorted(replay)
    expected = oracle(rows_1 + rows_2)
    assert _final_counts(replay) == {k: expected[k]["count"] for k in _final_counts(replay)}


def test_savepoint_restores_into_a_new_job_at_another_parallelism():
    rows_1, rows_2 = make_rows(800, 100, 3), make_rows(300, 100, 4)
    runner = _runner(parallelism=4)
    runner.run_epoch(rows_1)
    savepoint = runner.savepoint()
    assert savepoint.is_savepoint
    resumed = _runner(parallelism=3, job_id="resumed")
    resumed.restore_from(savepoint, runner.streams)
    outputs = resumed.run_epoch(rows_2)
    expected = oracle(rows_1 + rows_2)
    assert _final_counts(outputs) == {k: expected[k]["count"] for k in _final_counts(outputs)}


def test_retention_keeps_the_last_n():
    runner = _runner(parallelism=2, num_retained=2)
    for seed in range(4):
        runner.run_epoch(make_rows(50, 10, seed))
    assert [c.checkpoint_id for c in runner.store.completed()] == [3, 4]
    assert [p.checkpoint_id for p in runner.storage.completed()] == [3, 4]


def test_max_parallelism_cannot_change():
    runner = _runner(parallelism=2)
    runner.run_epoch(make_rows(50, 10, 0))
    other = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=256)
    with pytest.raises(ConfigurationError, match="max-parallelism=128"):
        other.restore_from(runner.latest_metadata(), runner.streams)


def test_bad_parallelism_is_a_clear_error():
    with pytest.raises(ConfigurationError, match="parallelism"):
        _runner(parallelism=0)
    with pytest.raises(ConfigurationError, match="exceeds max parallelism"):
        _runner(parallelism=129)


def test_unknown_operator_in_checkpoint_is_a_clear_error():
    runner = _runner(parallelism=1)
    runner.run_epoch(make_rows(10, 5, 0))
    other = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=1, max_parallelism=128,
                        operator_id="renamed")
    with pytest.raises(RestoreError, match="renamed"):
        other.restore_from(runner.latest_metadata(), runner.streams)


def test_every_key_matches_the_oracle_after_three_epochs():
    rows = [make_rows(400, 120, s) for s in range(3)]
    runner = _runner(parallelism=3)
    for part in rows:
        runner.run_epoch(part)
    import tempfile
    from statekit.conformance_tests.workload import dump_state
    with tempfile.TemporaryDirectory() as tmp:
        found = dump_state(runner.latest_metadata(), runner.streams, tmp)
    expected = oracle(rows[0] + rows[1] + rows[2])
    assert found == {k: expected_key_state(v) for k, v in expected.items()}


def test_a_batch_function_keeps_the_same_state_as_the_row_function(tmp_path):
    """``KeyedBatchFunction``: each key's rows of an epoch in one call, in input order."""
    from statekit.conformance_tests.workload import WorkloadBatchFunction, dump_state
    epochs = [[{"key": k, "category": c, "amount": a} for k, c, a in make_rows(400, 90, s)] for s in (5, 6)]
    runner = LocalRunner(WorkloadBatchFunction(), lambda row: row["key"], parallelism=2, max_parallelism=128)
    outputs = [runner.run_epoch(rows) for rows in epochs]
    assert sorted(outputs[1]) == sorted(_expected_outputs(epochs))
    found = dump_state(runner.latest_metadata(), runner.streams, str(tmp_path))
    expected = oracle([(r["key"], r["category"], r["amount"]) for rows in epochs for r in rows])
    assert found == {k: expected_key_state(v) for k, v in expected.items()}


def test_a_vector_function_keeps_the_same_state_as_the_row_function(tmp_path):
    """``KeyedVectorFunction``: an epoch's rows grouped by key in one call, state in bulk, output as columns."""
    from statekit.conformance_tests.workload import WorkloadVectorFunction, dump_state
    epochs = [[{"key": k, "category": c, "amount": a} for k, c, a in make_rows(400, 90, s)] for s in (5, 6)]
    runner = LocalRunner(WorkloadVectorFunction(), lambda row: row["key"], parallelism=2, max_parallelism=128)
    outputs = [runner.run_epoch(rows) for rows in epochs]
    assert sorted((r["key"], r["count"]) for r in outputs[1]) == sorted(_expected_outputs(epochs))
    found = dump_state(runner.latest_metadata(), runner.streams, str(tmp_path))
    expected = oracle([(r["key"], r["category"], r["amount"]) for rows in epochs for r in rows])
    assert found == {k: expected_key_state(v) for k, v in expected.items()}


def _expected_outputs(epochs):
    from statekit.conformance_tests.workload import expected_outputs
    as_rows = [[(r["key"], r["category"], r["amount"]) for r in rows] for rows in epochs]
    return expected_outputs(as_rows[1], as_rows[0])


def test_replaying_an_epoch_whose_restore_point_retention_removed_is_refused():
    """With one checkpoint retained, epoch 3's restore point (chk-2) is gone once chk-3 completes:
    replaying epoch 3 must not restore empty state and replace chk-3, which holds every epoch's state."""
    rows = [make_rows(300, 40, seed) for seed in range(3)]
    runner = _runner(parallelism=2, num_retained=1)
    for epoch_rows in rows:
        runner.run_epoch(epoch_rows)
    committed = runner.latest_metadata()
    with pytest.raises(RestoreError, match=r"epoch 3 .*cannot be replayed.*retains checkpoints \[3\]"):
        runner.run_epoch(rows[2], checkpoint_id=3)
    assert runner.latest_metadata() == committed, "the refused replay replaced the committed chk-3"
    outputs = runner.run_epoch([])
    assert outputs == [] and runner.latest_metadata().checkpoint_id == 4
    expected = oracle(rows[0] + rows[1] + rows[2] + rows[2][:1])
    final = runner.run_epoch(rows[2][:1])  # epoch 5 continues from chk-4: all of the state is there
    key = rows[2][0][0]
    assert _final_counts(final)[key] == expected[key]["count"]


def test_replaying_the_first_epoch_after_a_restore_from_a_snapshot_is_refused():
    """The first epoch after ``restore_from`` restored the snapshot; replaying it later must not
    start from empty state instead."""
    source = _runner(parallelism=2)
    source.run_epoch(make_rows(300, 40, 7))
    resumed = _runner(parallelism=2, job_id="resumed")
    resumed.restore_from(source.savepoint(), source.streams)
    rows = make_rows(100, 40, 8)
    resumed.run_epoch(rows)  # epoch 2, restored from the savepoint of chk-1
    committed = resumed.latest_metadata()
    with pytest.raises(RestoreError, match=r"epoch 2 .*cannot be replayed"):
        resumed.run_epoch(rows, checkpoint_id=2)
    assert resumed.latest_metadata() == committed, "the refused replay replaced the committed chk-2"


def test_replaying_an_epoch_that_restored_a_snapshot_is_refused_even_as_epoch_1():
    """An epoch numbered 1 that restored a snapshot did not start from empty state: its replay must
    restore nothing either way, so it is refused rather than run on empty state."""
    source = _runner(parallelism=2)
    source.run_epoch(make_rows(300, 40, 7))
    resumed = _runner(parallelism=2, job_id="resumed")
    resumed.restore_from(source.savepoint(), source.streams)
    rows = make_rows(100, 40, 8)
    resumed.run_epoch(rows, checkpoint_id=1)
    committed = resumed.latest_metadata()
    with pytest.raises(RestoreError, match=r"epoch 1 .*cannot be replayed"):
        resumed.run_epoch(rows, checkpoint_id=1)
    assert resumed.latest_metadata() == committed, "the refused replay replaced the committed chk-1"


def test_a_job_whose_first_epoch_is_not_1_replays_it_from_empty_state():
    """A job that started at epoch 5 (an explicit epoch number) started from empty state: a replay
    of epoch 5 does so again and gives the same state."""
    rows = make_rows(300, 40, 3)
    runner = _runner(parallelism=2)
    first = runner.run_epoch(rows, checkpoint_id=5)
    assert runner.run_epoch(rows, checkpoint_id=5) == first
    assert [c.checkpoint_id for c in runner.store.completed()] == [5]


def test_a_spark_epoch_whose_restore_point_retention_removed_is_refused_too():
    """The Spark runner's choice of restore point (driver side, no session needed) applies the same rule."""
    from statekit.checkpoint.store import CheckpointStore
    from statekit.spark.conf import StatekitConf
    from statekit.spark.restore_point import choose_restore_point

    runner = _runner(parallelism=2, num_retained=1)
    for seed in range(3):
        runner.run_epoch(make_rows(100, 20, seed))
    store = CheckpointStore(runner.storage, 1)
    conf = StatekitConf.parse({})
    with pytest.raises(RestoreError, match=r"epoch 3 cannot be replayed"):
        choose_restore_point(store, conf, "local-job", 3, None)
    assert choose_restore_point(store, conf, "local-job", 4, None).checkpoint.checkpoint_id == 3
    assert choose_restore_point(store, conf, "local-job", None, None).epoch == 4


def test_a_restart_with_another_max_parallelism_is_refused(tmp_path):
    """A runner continuing a job's own checkpoints with another max parallelism would look keys up
    in other key groups than their state is in: every key would silently start again from empty."""
    from statekit.storage.filesystem import FileSystemCheckpointStorage

    storage = FileSystemCheckpointStorage(tmp_path.as_uri())
    first = _runner(parallelism=2, storage=storage, job_id="job")
    first.run_epoch(make_rows(300, 30, 1))
    restarted = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=256,
                            storage=storage, job_id="job")
    with pytest.raises(ConfigurationError, match="max-parallelism=128"):
        restarted.run_epoch(make_rows(5, 30, 2))
    assert [c.checkpoint_id for c in restarted.store.completed()] == [1]


class FollowUp(KeyedProcessFunction):
    """An event-time timer per row; when one fires, a follow-up timer in each domain of another
    timer service, due at once (namespace "f")."""

    def process(self, row, ctx):
        ctx.timer_service().register_event_time_timer(row[1])

    def on_timer(self, timestamp, ctx):
        yield ctx.current_key, ctx.time_domain.value, timestamp, ctx.timer.namespace
        if ctx.timer.namespace is None:
            follow_up = ctx.timer_service("follow-up")
            follow_up.register_event_time_timer(timestamp, "f")
            follow_up.register_processing_time_timer(follow_up.current_processing_time(), "f")


def test_due_timers_of_a_service_first_used_while_timers_fire_fire_in_that_epoch():
    times = iter(range(1000, 10 ** 9, 1000))
    runner = LocalRunner(FollowUp(), lambda row: row[0], parallelism=1, event_time=lambda row: row[1],
                         watermark_delay="0 ms", clock=lambda: next(times))
    runner.run_epoch([("a", 5), ("b", 7)])
    fired = runner.run_epoch([])  # the watermark 7, the processing time 2000
    assert fired[:4] == [("a", "event-time", 5, None), ("a", "event-time", 5, "f"), ("b", "event-time", 7, None),
                         ("b", "event-time", 7, "f")], "in timestamp order, the new service's timers among the others"
    assert sorted(fired[4:]) == [("a", "processing-time", 2000, "f"), ("b", "processing-time", 2000, "f")]


class Echo(KeyedProcessFunction):
    def process(self, row, ctx):
        yield row


def test_a_record_without_event_time_is_processed_and_moves_no_watermark_as_under_spark():
    runner = LocalRunner(Echo(), lambda row: row[0], parallelism=1, event_time=lambda row: row[1],
                         watermark_delay="0 ms")
    assert runner.run_epoch([("a", 5), ("b", None)]) == [("a", 5), ("b", None)]
    assert runner.run_epoch([("c", None), ("d", 4)]) == [("c", None)]  # the watermark 5: d is late
    properties = runner.latest_metadata().properties
    assert (properties["watermark_ms"], properties["max_event_time_ms"], properties["late_rows_dropped"]) == (5, 5, 1)


def test_records_late_by_their_timestamp_are_the_side_output_of_a_function_that_does_not_judge_lateness():
    runner = LocalRunner(Echo(), lambda row: row[0], parallelism=2, event_time=lambda row: row[1],
                         watermark_delay="0 ms", late_rows="side_output")
    assert sorted(runner.run_epoch([("a", 5), ("b", 9)])) == [("a", 5), ("b", 9)] and runner.late_output == []
    assert runner.run_epoch([("c", 9), ("d", 10), ("e", 3)]) == [("d", 10)]  # the watermark 9
    assert runner.late_output == [("c", 9), ("e", 3)], "in input order, the row at the watermark included"
    properties = runner.latest_metadata().properties
    assert properties["late_rows_side_output"] == 2 and "late_rows_dropped" not in properties
    assert runner.run_epoch([]) == [] and runner.late_output == [], "each epoch's own"


class _Seen(KeyedProcessFunction):
    def process(self, row, ctx):
        yield row["user"], row.get("ts")


def _event_time_runner(tmp_path, function=None):
    from statekit.storage.filesystem import FileSystemCheckpointStorage
    return LocalRunner(function or _Seen(), lambda row: row["user"], event_time="ts", watermark_delay="0 ms",
                       storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints")), job_id="times")


def _window_count():
    from statekit import windows
    return windows.aggregate(windows.TumblingWindows.of("10 ms"), windows.Count(), timestamp="ts")


@pytest.mark.parametrize("function", [None, _window_count()], ids=["plain", "window"])
def test_a_record_without_its_event_time_field_is_refused_naming_it(tmp_path, function):
    with pytest.raises(ConfigurationError, match=r"record \{'user': 'bob'\} has no event-time field 'ts'") as caught:
        _event_time_runner(tmp_path, function).run_epoch([{"user": "ann", "ts": 1}, {"user": "bob"}])
    assert "event_time=" in str(caught.value), "the fix is named"


def test_a_window_row_without_its_timestamp_field_is_refused_naming_it():
    """The window operator reads its own ``timestamp=`` column (the job may have no event time)."""
    runner = LocalRunner(_window_count(), lambda row: row["user"])
    with pytest.raises(ConfigurationError, match=r"row \{'user': 'bob'\} has no event-time field 'ts' "
                                                 r"\(timestamp='ts'\)"):
        runner.run_epoch([{"user": "bob"}])


def test_an_event_time_beyond_64_bits_is_refused_and_records_no_watermark(tmp_path):
    """2**70 was taken: checkpoint 1 recorded it as the largest event time, so every later row (and
    every row after a restart) was late and dropped."""
    runner = _event_time_runner(tmp_path)
    runner.run_epoch([{"user": "ann", "ts": 1}])
    with pytest.raises(ConfigurationError, match=r"record \{'user': 'bob', 'ts': 1180591620717411303424\}: event "
                                                 r"time 1180591620717411303424 is outside the 64-bit range") as caught:
        runner.run_epoch([{"user": "bob", "ts": 2 ** 70}])
    assert "9223372036854775807" in str(caught.value), "the range is named"
    with pytest.raises(ConfigurationError, match="outside the 64-bit range"):
        runner.run_epoch([{"user": "bob", "ts": -(2 ** 63) - 1}])
    assert runner.run_epoch([{"user": "bob", "ts": 5}]) == [("bob", 5)], "a later row is not late"
    assert runner.latest_metadata().properties["max_event_time_ms"] == 5
    assert _event_time_runner(tmp_path).run_epoch([{"user": "cy", "ts": 6}]) == [("cy", 6)], "nor after a restart"


@pytest.mark.parametrize("now", [float("nan"), float("inf"), "soon", None, 2.0 ** 70])
def test_a_clock_that_returns_no_time_is_refused(now):
    runner = LocalRunner(_Seen(), lambda row: row["user"], clock=lambda: now)
    with pytest.raises(ConfigurationError, match=r"the LocalRunner's clock returned .*epoch milliseconds"):
        runner.run_epoch([{"user": "ann"}])
    assert runner.latest_metadata() is None


def test_a_float_clock_is_taken_in_whole_milliseconds():
    runner = LocalRunner(_Seen(), lambda row: row["user"], clock=lambda: 1234.9)
    runner.run_epoch([{"user": "ann"}])
    assert runner.latest_metadata().properties["processing_time_ms"] == 1234


def test_the_timer_service_in_initialize_state_is_refused_naming_where_timers_go():
    from statekit.runtime.function import CheckpointedFunction

    class TimersAtStart(_Seen, CheckpointedFunction):
        def initialize_state(self, ctx):
            ctx.timer_service().register_event_time_timer(5)

    with pytest.raises(ConfigurationError, match=r"ctx.timer_service\(\) in initialize_state.*register timers in "
                                                 r"process or on_timer"):
        LocalRunner(TimersAtStart(), lambda row: row["user"]).run_epoch([{"user": "ann"}])


class _CountKeys(KeyedProcessFunction):
    def open(self, ctx):
        from statekit import ValueStateDescriptor
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process(self, row, ctx):
        self.count.update(self.count.value() + 1)
        yield ctx.current_key, self.count.value()


def _backends(tmp_path):
    from statekit.backends.heap import HeapStateBackend
    from statekit.backends.lmdb import LMDBStateBackend
    from statekit.backends.rocksdb import RocksDBStateBackend
    return {"heap": HeapStateBackend(), "rocksdb": RocksDBStateBackend(), "lmdb": LMDBStateBackend()}


@pytest.mark.parametrize("name", ["heap", "rocksdb", "lmdb"])
def test_null_and_decimal_keys_are_keys_as_spark_groups_them(tmp_path, name):
    """Spark groups by a null and by a decimal column: a null key hashes as the seed, a Decimal as the
    decimal(38,18) PySpark infers (or the key type given), and equal decimals are one key, given at
    their column's scale as Spark gives them, in every backend, across a rescale, a savepoint and a
    backend switch."""
    from decimal import Decimal

    from statekit.spi.key_groups import key_group_for_key
    backends = _backends(tmp_path)
    keys = [None, Decimal("1.5"), Decimal("1.50"), Decimal("-0"), Decimal("0.000"),
            Decimal("12345678901234567890.123456789012345678"), ("a", None), ("a", Decimal("2")), "plain"]
    runner = LocalRunner(_CountKeys(), lambda row: row, parallelism=2, state_backend=backends[name],
                         local_dir=str(tmp_path / "local"))
    first = runner.run_epoch(keys)
    scaled = [None, Decimal("1.500000000000000000"), Decimal("0E-18"),
              Decimal("12345678901234567890.123456789012345678"), ("a", None), ("a", Decimal("2.000000000000000000")),
              "plain"]
    assert {repr(k) for k, _ in first} == {repr(k) for k in scaled}, "decimals at the scale Spark gives them"
    assert max(n for k, n in first if k == Decimal("1.5")) == 2 and max(n for k, n in first if k == 0) == 2
    assert key_group_for_key(None, runner.max_parallelism) == 42 % runner.max_parallelism
    runner.rescale(3)
    assert sorted(runner.run_epoch([None, Decimal("1.50"), ("a", Decimal("2.0"))]), key=repr) == sorted(
        [(None, 2), (Decimal("1.500000000000000000"), 3), (("a", Decimal("2.000000000000000000")), 2)], key=repr)
    savepoint = runner.savepoint()
    for other in backends:
        moved = LocalRunner(_CountKeys(), lambda row: row, parallelism=1, state_backend=_backends(tmp_path)[other],
                            job_id=f"moved-{other}", local_dir=str(tmp_path / f"local-{other}"))
        moved.restore_from(savepoint, runner.streams)
        assert sorted(moved.run_epoch([None, Decimal("1.5"), Decimal("0"), ("a", None)]), key=repr) == sorted(
            [(None, 3), (Decimal("1.500000000000000000"), 4), (Decimal("0E-18"), 3), (("a", None), 2)], key=repr), other


def test_decimal_keys_take_the_scale_of_their_key_type():
    from decimal import Decimal

    from statekit.spi.key_groups import key_group_for_key
    runner = LocalRunner(_CountKeys(), lambda row: row, key_types=["decimal(10,2)"])
    assert sorted(runner.run_epoch([Decimal("1.5"), Decimal("1.50"), Decimal("-3")]), key=repr) == sorted(
        [(Decimal("1.50"), 1), (Decimal("1.50"), 2), (Decimal("-3.00"), 1)], key=repr)
    assert key_group_for_key(Decimal("1.5"), 128, ["decimal(10,2)"]) != key_group_for_key(Decimal("1.5"), 128)
    with pytest.raises(ConfigurationError, match=r"key Decimal\('1.005'\) does not fit key type 'decimal\(10,2\)'"):
        runner.run_epoch([Decimal("1.005")])
    with pytest.raises(ConfigurationError, match=r"key Decimal\('1E\+10'\) does not fit key type 'decimal\(10,2\)'"):
        runner.run_epoch([Decimal("1E+10")])
    with pytest.raises(ConfigurationError, match=r"key Decimal\('NaN'\) .* give a finite decimal.Decimal"):
        runner.run_epoch([Decimal("NaN")])


@pytest.mark.parametrize("key, key_types, named", [
    (2 ** 100, None, ("key 1267650600228229401496703205376 is outside the range of a bigint key column",
                      "9223372036854775807", "decimal.Decimal")),
    (-(2 ** 63) - 1, None, ("outside the range of a bigint key column",)),
    (2 ** 31, ["int"], ("key 2147483648 is outside the range of a int key column", "key_types bigint")),
    ("\ud800", None, ("key '\\ud800' is not valid Unicode text", "surrogates not allowed", "surrogatepass")),
    (("a", "b\udfff"), None, ("key 'b\\udfff' is not valid Unicode text",)),
    (1, ["string"], ("key 1 (int) is not a value of key type 'string'", "key_types")),
    ("x", ["bigint"], ("key 'x' (str) is not a value of key type 'bigint'",)),
    (1, ["decimal(10,2)"], ("key 1 (int) is not a value of key type 'decimal(10,2)'", "decimal.Decimal")),
    (object(), None, ("cannot hash a key of type object",)),
], ids=["2**100", "below-bigint", "beyond-int", "surrogate", "surrogate-in-tuple", "int-as-string", "str-as-bigint",
        "int-as-decimal", "object"])
def test_a_key_spark_would_not_hold_is_refused_naming_it(key, key_types, named):
    runner = LocalRunner(_CountKeys(), lambda row: row, key_types=key_types)
    with pytest.raises(ConfigurationError) as caught:
        runner.run_epoch([key])
    for name in named:
        assert name in str(caught.value), f"{name!r} is not in: {caught.value}"
    assert runner.latest_metadata() is None
