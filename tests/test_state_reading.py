"""Reading state without Spark: statekit.reading, statekit.query and ``statekit state get`` on
checkpoints (full and incremental) and savepoints of every backend, checked against the
workload's oracle key by key; key lookups read one key group; the change feed between two
checkpoints equals the oracle's difference; TTL, timers and undecodable values."""
from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from typing import Any

import pytest

from statekit import KeyedProcessFunction, StateTtlConfig, ValueStateDescriptor, windows
from statekit.conformance_tests.workload import WorkloadFunction, make_rows, oracle
from statekit.query import QueryableState
from statekit.reading.changes import DELETE, PUT, changed_key_groups, changes
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.registry import backend_class, storage_class
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.timers import timer_state_name
from statekit.spi import ConfigurationError, KeyGroupsStateHandle, StreamStateHandle
from statekit.spi.timers import TimeDomain

BACKENDS = ["heap", "rocksdb", "lmdb", "sqlite"]


def _runner(backend: str, tmp_path: Any, *, incremental: bool, parallelism: int = 3, **kwargs: Any) -> LocalRunner:
    options = {} if backend == "heap" else {"local-dir": str(tmp_path / "working")}
    function = kwargs.pop("function", None) or WorkloadFunction()
    return LocalRunner(function, kwargs.pop("key_selector", lambda row: row[0]), parallelism=parallelism,
                       state_backend=backend_class(backend)(**options),
                       storage=storage_class("filesystem")(f"file://{tmp_path}/checkpoints"), job_id="job",
                       incremental=incremental, num_retained=5, **kwargs)


def state_of(cells: Any) -> dict[str, dict[str, Any]]:
    """The workload's state per key, from its cells, in the oracle's form."""
    found: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "last": [], "sums": {}, "max": None,
                                                           "mean": [0, 0]})
    for cell in cells:
        assert cell.error is None, cell
        s = found[cell.key]
        if cell.state == "last":
            s["last"].append(cell.value)
        elif cell.state == "sums":
            s["sums"][cell.user_key] = cell.value
        else:
            s[cell.state] = cell.value
    return dict(found)


def read_all(reader: SnapshotReader, parallelism: int | None = None) -> list[Any]:
    operator = reader.operator()
    p = parallelism or operator.parallelism
    return [cell for index in range(p) for cell in reader.cells(operator, index, p)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_a_checkpoint_reads_as_the_oracle_state(backend, incremental, tmp_path):
    runner = _runner(backend, tmp_path, incremental=incremental)
    epochs = [make_rows(2000, 400, seed) for seed in (1, 2, 3)]
    for rows in epochs:
        runner.run_epoch(rows)
    reader = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job")  # the job directory: its latest
    assert reader.metadata.checkpoint_id == 3
    expected = oracle([row for rows in epochs for row in rows])
    assert state_of(read_all(reader)) == expected
    assert state_of(read_all(reader, parallelism=reader.operator().max_parallelism)) == expected, \
        "read one key group at a time"
    savepoint = runner.savepoint(f"file://{tmp_path}/savepoints")
    saved = SnapshotReader.open(f"file://{tmp_path}/savepoints/savepoint-job-{savepoint.checkpoint_id}")
    assert state_of(read_all(saved)) == expected


class _RecordingStreams:
    """Checkpoint streams that record every stream a read opens: (method, file, offset, length)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.opened = inner, []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            if args and isinstance(args[0], StreamStateHandle):
                self.opened.append((name, args[0].stored_as, *args[1:3]))
            return method(*args, **kwargs)
        return recorded


@pytest.mark.parametrize("backend,incremental", [("heap", False), ("rocksdb", True), ("lmdb", True)])
def test_a_key_lookup_reads_only_its_key_group(backend, incremental, tmp_path):
    rows = [make_rows(3000, 500, 4), make_rows(500, 500, 5)]
    runner = _runner(backend, tmp_path, incremental=incremental)
    for epoch in rows:
        runner.run_epoch(epoch)
    runner.savepoint(f"file://{tmp_path}/savepoints")
    expected = oracle(rows[0] + rows[1])["key-7"]
    # a full checkpoint and a savepoint are canonical; incremental ones are RocksDB's SSTs or changelog chains
    for url, canonical in ((f"file://{tmp_path}/checkpoints/job", not incremental),
                           (f"file://{tmp_path}/savepoints/savepoint-job-2", True)):
        reader = SnapshotReader.open(url)
        reader.streams = recording = _RecordingStreams(reader.streams)
        operator = reader.operator()
        key_group = reader.key_group_of(operator, "key-7")
        assert state_of(reader.cells_of_key(operator, "key-7")) == {"key-7": expected}
        handles = [h for s in operator.subtasks for h in s.keyed if isinstance(h, KeyGroupsStateHandle)
                   and key_group in h.key_group_range]
        assert bool(handles) == canonical, url
        if canonical:  # one range read: exactly the key group's bytes
            byte_range = handles[0].key_groups[key_group]
            assert recording.opened == [("read_range", handles[0].stream.stored_as, byte_range.offset,
                                         byte_range.length)], url
        else:  # only files of the subtask holding the key group
            owner = next(s for s in operator.subtasks for h in s.keyed if key_group in h.key_group_range)
            allowed = {stream.stored_as for h in owner.keyed for stream in h.stream_handles()}
            opened = {file for _, file, *_ in recording.opened}
            assert opened and opened <= allowed, (opened - allowed, url)
            others = {stream.stored_as for s in operator.subtasks if s is not owner for h in s.keyed
                      for stream in h.stream_handles()}
            assert not opened & (others - allowed), url


def _cells(state: dict[str, dict[str, Any]]) -> dict[tuple, Any]:
    """The oracle state as cells: (state, key, map key or list position) -> value."""
    cells: dict[tuple, Any] = {}
    for key, s in state.items():
        for name in ("count", "max", "mean"):
            cells[(name, key, None)] = s[name]
        cells.update({("sums", key, category): v for category, v in s["sums"].items()})
        cells.update({("last", key, i): v for i, v in enumerate(s["last"])})
    return cells


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_change_feed_is_the_oracle_difference_across_a_rescale(backend, tmp_path):
    runner = _runner(backend, tmp_path, incremental=True)
    first, second = make_rows(2000, 300, 6), make_rows(400, 600, 7)
    runner.run_epoch(first)
    runner.rescale(5)
    runner.run_epoch(second)
    before = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job/chk-1")
    after = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job/chk-2")
    found = [c for index in range(5) for c in changes(before, after, before.operator(), after.operator(), index, 5)]
    was, now = _cells(oracle(first)), _cells(oracle(first + second))
    expected = Counter((PUT, cell[0], cell[1], json.dumps(v)) for cell, v in now.items() if was.get(cell) != v)
    expected.update((DELETE, cell[0], cell[1], json.dumps(v)) for cell, v in was.items() if cell not in now)
    assert Counter((c.change, c.cell.state, c.cell.key, json.dumps(c.cell.value)) for c in found) == expected
    assert any(c.change == PUT for c in found) and len({c.cell.key for c in found}) > 100


class _Remember(KeyedProcessFunction):
    """Keeps each key's latest value with a TTL of 10 seconds of processing time."""

    def open(self, ctx):
        self.latest = ctx.get_state(ValueStateDescriptor("latest", ttl=StateTtlConfig(10)))

    def process(self, row, ctx):
        self.latest.update(row[1])


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_ttl_entries_carry_their_write_time_and_expired_ones_are_left_out(backend, incremental, tmp_path):
    now = [1_000_000]
    runner = _runner(backend, tmp_path, incremental=incremental, function=_Remember(), clock=lambda: now[0],
                     ttl_sweep_seconds=0)
    runner.run_epoch([(f"old-{i}", i) for i in range(50)])
    now[0] += 8_000
    runner.run_epoch([(f"new-{i}", i) for i in range(50)])
    now[0] += 5_000  # the old entries are 13 s old: expired at this epoch's processing time
    runner.run_epoch([])
    cells = read_all(SnapshotReader.open(f"file://{tmp_path}/checkpoints/job"))
    assert sorted(c.key for c in cells) == sorted(f"new-{i}" for i in range(50))
    assert {c.ttl_timestamp for c in cells} == {1_008_000}
    assert QueryableState(f"file://{tmp_path}/checkpoints/job").get("latest", "new-3") == 3


def test_pending_timers_and_windows_read_as_cells(tmp_path):
    sums = windows.aggregate(windows.TumblingWindows.of("10 seconds"), windows.Count(), timestamp="ts")
    runner = _runner("rocksdb", tmp_path, incremental=True, function=sums, key_selector=lambda row: row["k"],
                     event_time="ts", watermark_delay="0 ms")
    runner.run_epoch([{"k": "a", "ts": 1_000}, {"k": "a", "ts": 12_000}, {"k": "b", "ts": 15_000}])
    query = QueryableState(f"file://{tmp_path}/checkpoints/job")
    timers = timer_state_name(windows.operator.WINDOW_TIMERS, TimeDomain.EVENT_TIME)
    assert query.kind(timers) == "timers"
    assert query.get(timers, "a") == [] and query.get(timers, "b") == [], "timers are in window namespaces"
    cells = query.cells("a", [timers])
    assert sorted((c.namespace, c.user_key) for c in cells) == [
        (windows.TimeWindow(0, 10_000), 9_999), (windows.TimeWindow(10_000, 20_000), 19_999)]
    accumulators = {c.namespace: c.value for c in query.cells("a", ["window-accumulator"])}
    assert accumulators == {windows.TimeWindow(0, 10_000): 1, windows.TimeWindow(10_000, 20_000): 1}


class _PerNamespace(KeyedProcessFunction):
    """Writes each row's value in namespaces equal in Python but apart in bytes, and in a NaN."""

    def open(self, ctx):
        self.value = ctx.get_state(ValueStateDescriptor("v"))

    def process(self, row, ctx):
        for namespace in (1, 1.0, True, float("nan")):
            self.value.set_current_namespace(namespace)
            self.value.update(f"{row[1]} in {type(namespace).__name__} {namespace!r}")


def test_a_query_finds_a_namespace_by_its_bytes(tmp_path):
    """Namespaces 1, 1.0 and True are three in state (their bytes differ) and a query names one of
    them, not the first equal in Python; a NaN finds the NaN namespace."""
    runner = _runner("heap", tmp_path, incremental=False, function=_PerNamespace())
    runner.run_epoch([("k", "x")])
    query = QueryableState(f"file://{tmp_path}/checkpoints/job")
    found = [query.get("v", "k", namespace) for namespace in (True, 1.0, 1, float("nan"))]
    assert found == ["x in bool True", "x in float 1.0", "x in int 1", "x in float nan"]
    assert query.get("v", "k") is None


def test_a_value_whose_serializer_cannot_be_imported_keeps_its_bytes(tmp_path, monkeypatch):
    module = tmp_path / "gone_serializers.py"
    module.write_text(textwrap.dedent("""
        from statekit.spi.serializer import TypeSerializer

        class Upper(TypeSerializer):
            def serialize(self, value):
                return value.upper().encode()

            def deserialize(self, data):
                return data.decode()
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import gone_serializers

    class Keep(KeyedProcessFunction):
        def open(self, ctx):
            self.name = ctx.get_state(ValueStateDescriptor("name", gone_serializers.Upper()))

        def process(self, row, ctx):
            self.name.update(row[1])

    runner = _runner("heap", tmp_path, incremental=False, function=Keep())
    runner.run_epoch([("k", "alice")])
    monkeypatch.delitem(sys.modules, "gone_serializers")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    (cell,) = read_all(SnapshotReader.open(f"file://{tmp_path}/checkpoints/job"))
    assert cell.value is None and cell.value_bytes == b"ALICE"
    assert "value not decoded" in cell.error and "gone_serializers" in cell.error
    with pytest.raises(ConfigurationError, match="cannot be decoded here"):
        QueryableState(f"file://{tmp_path}/checkpoints/job").get("name", "k")


def test_queryable_state_reads_each_kind_and_refreshes(tmp_path):
    runner = _runner("lmdb", tmp_path, incremental=True)
    first = make_rows(1000, 50, 8)
    runner.run_epoch(first)
    query = QueryableState(checkpoint_dir=f"file://{tmp_path}/checkpoints", job_id="job")
    expected = oracle(first)["key-3"]
    assert query.checkpoint_id == 1
    assert [query.get(s, "key-3") for s in ("count", "last", "sums", "max", "mean")] == \
        [expected[s] for s in ("count", "last", "sums", "max", "mean")]
    assert query.get("count", "no-such-key") is None and query.get("last", "no-such-key") == []
    second = make_rows(200, 50, 9)
    runner.run_epoch(second)
    assert query.get("count", "key-3") == expected["count"], "a query stays on its checkpoint until refreshed"
    query.refresh()
    assert query.checkpoint_id == 2 and query.get("count", "key-3") == oracle(first + second)["key-3"]["count"]
    with pytest.raises(ConfigurationError, match="holds no state 'nope'.*'count'"):
        query.get("nope", "key-3")


def test_a_local_jobs_key_types_choose_the_key_group_of_a_lookup(tmp_path):
    """A local job whose keys hash as Spark ints (``key_types``) records them: a lookup hashes the
    key as the job did, not as the bigint a Python int would be taken for; a key that is not an
    int is a clear error."""
    runner = _runner("heap", tmp_path, incremental=False, function=_Remember(), key_types=["int"])
    runner.run_epoch([(n, n * 10) for n in range(20)])
    state = QueryableState(f"file://{tmp_path}/checkpoints/job")
    assert [state.get("latest", n) for n in range(20)] == [n * 10 for n in range(20)]
    assert [(c.name, c.type) for c in state.key_columns] == [("key", "int")]
    for wrong in ("seven", 2 ** 40):  # a clear error, not struct's
        with pytest.raises(ConfigurationError, match=r"does not fit the job's key columns \(key int\)"):
            state.get("latest", wrong)


def test_the_state_get_command(tmp_path):
    runner = _runner("rocksdb", tmp_path, incremental=True)
    rows = make_rows(1000, 50, 10)
    runner.run_epoch(rows)
    job = f"file://{tmp_path}/checkpoints/job"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "statekit.cli", "state", "get", job, *args],
                              capture_output=True, text=True)

    done = cli("--state", "sums", "--key", "key-4")
    assert done.returncode == 0 and json.loads(done.stdout) == oracle(rows)["key-4"]["sums"], done
    doc = json.loads(cli("--state", "last", "--key", "key-4", "--json").stdout)
    assert doc["value"] == oracle(rows)["key-4"]["last"] and doc["kind"] == "list" and doc["checkpoint_id"] == 1
    failed = cli("--state", "count", "--key", "key-4", "--operator", "other")
    assert failed.returncode == 2 and "holds no operator 'other'" in failed.stderr
    assert "spark.read.format('statekit')" in subprocess.run(
        [sys.executable, "-m", "statekit.cli", "checkpoints", "describe", job], capture_output=True, text=True).stdout


@pytest.mark.parametrize("key_types, key, given", [
    (["double"], 1.5, "1.5"), (["boolean"], True, "true"), (["date"], _dt.date(2024, 1, 31), "2024-01-31"),
    (["timestamp"], _dt.datetime(2024, 1, 31, 12, tzinfo=_dt.timezone.utc), "2024-01-31T12:00:00+00:00"),
    (["date", "int"], (_dt.date(2024, 1, 31), 7), '["2024-01-31", 7]'),
    (["string", "double"], ("a", 2.0), '["a", 2]'),
], ids=lambda p: p if isinstance(p, str) else None)
def test_state_get_types_the_key_text_as_the_key_columns(capsys, tmp_path, key_types, key, given):
    """``--key`` text names a key of any recorded column type (a date column took only JSON, so no
    date could be given), and text that is not of the column's type is one clear error line, not a
    traceback of json's."""
    from statekit.cli import main

    runner = _runner("heap", tmp_path, incremental=False, function=_Remember(), key_types=key_types)
    runner.run_epoch([(key, 42)])
    job = f"file://{tmp_path}/checkpoints/job"
    assert main(["state", "get", job, "--state", "latest", "--key", given]) == 0
    assert capsys.readouterr().out.strip() == "42"
    wrong = "not-a-value" if len(key_types) == 1 else '["not-a-value", "not-a-value"]'
    assert main(["state", "get", job, "--state", "latest", "--key", wrong]) == 2
    err = capsys.readouterr().err.strip()
    typed = next(t for t in key_types if t != "string")
    assert err.startswith("statekit: error: --key") and f"is a {typed}" in err and "\n" not in err, err


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_the_change_feed_deletes_ttl_entries_that_expired_where_no_delta_wrote(backend, tmp_path):
    """An entry that expired between two checkpoints reads as gone from the later one, so the
    feed deletes it, also when no changelog delta wrote its key group (no sweep, no access)."""
    now = [1_000_000]
    runner = _runner(backend, tmp_path, incremental=True, parallelism=2, function=_Remember(),
                     clock=lambda: now[0], ttl_sweep_seconds=0)
    runner.run_epoch([(f"old-{i}", i) for i in range(50)])
    now[0] += 13_000
    runner.run_epoch([("new-1", 1)])
    before = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job/chk-1")
    after = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job/chk-2")
    assert sorted(c.key for c in read_all(after)) == ["new-1"]
    found = [c for index in range(2) for c in changes(before, after, before.operator(), after.operator(), index, 2)]
    assert Counter((c.change, c.cell.key) for c in found) == Counter(
        [(PUT, "new-1")] + [(DELETE, f"old-{i}") for i in range(50)])


@pytest.mark.parametrize("backend", ["heap", "lmdb"])
def test_the_change_feed_reads_only_the_key_groups_a_changelog_delta_wrote(backend, tmp_path):
    runner = _runner(backend, tmp_path, incremental=True, parallelism=2)
    first = make_rows(2000, 300, 11)
    second = [row for row in make_rows(2000, 300, 12) if row[0] in ("key-1", "key-2", "key-3")]
    runner.run_epoch(first)
    runner.run_epoch(second)
    before = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job/chk-1")
    after = SnapshotReader.open(f"file://{tmp_path}/checkpoints/job/chk-2")
    before_op, after_op = before.operator(), after.operator()
    touched = {after.key_group_of(after_op, key) for key in ("key-1", "key-2", "key-3")}
    assert set().union(*(changed_key_groups(before_op, after_op, i, 2) for i in range(2))) == touched
    before.streams, after.streams = _RecordingStreams(before.streams), _RecordingStreams(after.streams)
    found = [c for index in range(2) for c in changes(before, after, before_op, after_op, index, 2)]
    was, now = _cells(oracle(first)), _cells(oracle(first + second))
    assert Counter((c.change, c.cell.state, c.cell.key, json.dumps(c.cell.value)) for c in found) == Counter(
        (PUT, cell[0], cell[1], json.dumps(v)) for cell, v in now.items() if was.get(cell) != v)
    ranges = {(h.stream.stored_as, r.offset, r.length): kg for op in (before_op, after_op) for s in op.subtasks
              for chain in s.keyed for h in (chain.base, *chain.deltas) for kg, r in h.key_groups.items()}
    files: dict[str, set[int]] = {}
    for (file, _, _), kg in ranges.items():
        files.setdefault(file, set()).add(kg)
    # a range per key group read, or a whole file when every key group it holds is read (verified whole)
    read = [kg for streams in (before.streams, after.streams) for _, file, *span in streams.opened
            for kg in ([ranges.get((file, *span))] if span else files[file])]
    assert read and set(read) <= touched, "only the changed key groups' bytes are read"


def test_a_job_id_that_leaves_the_checkpoint_directory_is_refused(tmp_path):
    """checkpoint_dir + job_id name ``<checkpoint_dir>/<job_id>``: a job id is checked as jobs check
    theirs, so ``../other/job`` never reads a job outside the checkpoint directory."""
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2,
                         storage=storage_class("filesystem")(f"file://{tmp_path}/other"), job_id="job")
    runner.run_epoch(make_rows(100, 10, 1))
    (tmp_path / "checkpoints").mkdir()
    for job_id in ("../other/job", "job/../../other/job", ".."):
        with pytest.raises(ConfigurationError, match=r"is not a valid job id"):
            QueryableState(checkpoint_dir=f"file://{tmp_path}/checkpoints", job_id=job_id)
