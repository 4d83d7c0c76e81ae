"""End-to-end exactly-once output: a streaming query writing to a transactional sink is killed
(SIGKILL of the driver) at each point of the commit protocol and started again; every sink then
holds exactly the failure-free output, every row once. A plain function sink appending Parquet
shows the difference: a replayed micro-batch's output arrives twice (at least once).

Kill points (``tests/jobs/killable_stream.py``): in a task mid-epoch; right after a subtask
pre-committed; after the checkpoint completed, before the commit; after a commit. A write-ahead
sink has no pre-commit (its log is part of the snapshot). Backends rotate over the cases so that
each sink and each kill point meet every backend (the sink protocol is the same for all; what a
backend changes is the state, which the restarted query must continue from); two cases run on
``local-cluster`` (executors in processes of their own).
"""
import signal
import sqlite3
from collections import Counter

import psycopg
import pyarrow.dataset as ds
import pytest

from statekit.conformance_tests.workload import expected_outputs, make_rows

from killable import run_killable, write_micro_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]
BATCHES = 2
KILLED_BATCH = 1
LOCAL = "local[2,3]"
CLUSTER = "local-cluster[2,1,1024]"


def _write_source(work):
    epochs = [make_rows(300, 60, seed) for seed in range(71, 71 + BATCHES)]
    write_micro_batches(work, epochs)
    return epochs


def _failure_free(epochs):
    rows = []
    for i, epoch in enumerate(epochs):
        rows += expected_outputs(epoch, [r for e in epochs[:i] for r in e])
    return Counter(rows)


def _run(work, backend, kill, sink, master=LOCAL):
    return run_killable(work, backend, kill, "workload", sink, master)


def _sink_argument(kind, work, postgres):
    """The job's SINK argument, and the output table (created here, as a user would)."""
    if kind == "sqlite":
        with sqlite3.connect(work / "output.sqlite") as connection:
            connection.execute("CREATE TABLE output (key TEXT, count INTEGER)")
    if kind != "postgres":
        return kind, None
    table = f"output_{abs(hash(str(work))) % 10**9}"
    with psycopg.connect(postgres.conninfo, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {table} (key text, count bigint)")
    return f"postgres:{table}:{postgres.conninfo}", table


def _output(kind, work, postgres, table=None):
    if kind in ("parquet", "append"):
        rows = ds.dataset(str(work / "output"), format="parquet").to_table().to_pylist()
        return Counter((r["key"], r["count"]) for r in rows)
    if kind == "sqlite":
        with sqlite3.connect(work / "output.sqlite") as connection:
            return Counter(connection.execute("SELECT key, count FROM output").fetchall())
    with psycopg.connect(postgres.conninfo) as connection:
        return Counter(connection.execute(f"SELECT key, count FROM {table}").fetchall())


CASES = [  # sink, kill point, backend, master: every sink and every kill point meet every backend (a
    # pre-commit, which only two-phase-commit sinks have, meets two)
    ("parquet", "task", "heap", LOCAL),
    ("parquet", "precommit", "rocksdb", CLUSTER),
    ("parquet", "checkpoint", "lmdb", LOCAL),
    ("parquet", "commit", "heap", LOCAL),
    ("postgres", "task", "rocksdb", LOCAL),
    ("postgres", "precommit", "heap", LOCAL),
    ("postgres", "checkpoint", "rocksdb", CLUSTER),
    ("postgres", "commit", "lmdb", LOCAL),
    ("sqlite", "task", "lmdb", LOCAL),
    ("sqlite", "checkpoint", "heap", LOCAL),
    ("sqlite", "commit", "rocksdb", LOCAL),
]


@pytest.mark.parametrize("kind,point,backend,master", CASES, ids=["-".join(c[:3]) for c in CASES])
def test_killed_query_leaves_exactly_the_failure_free_output(tmp_path, postgres, kind, point, backend, master):
    epochs = _write_source(tmp_path)
    sink, table = _sink_argument(kind, tmp_path, postgres)
    killed = _run(tmp_path, backend, f"{point}:{KILLED_BATCH}", sink, master)
    assert killed.returncode == -signal.SIGKILL, f"the driver was not killed:\n{killed.stderr[-3000:]}"
    before = _output(kind, tmp_path, postgres, table)
    restarted = _run(tmp_path, backend, "none", sink, master)
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    expected = _failure_free(epochs)
    assert _output(kind, tmp_path, postgres, table) == expected
    # what a reader saw while the query was down: never a row twice; before any commit of the killed
    # epoch, exactly the epochs before it (afterwards, some of its subtasks' output may be committed)
    assert not before - expected, "a reader saw rows twice"
    if point != "commit":
        earlier = [r for i, e in enumerate(epochs[:KILLED_BATCH]) for r in expected_outputs(e, [x for y in epochs[:i] for x in y])]
        assert before == Counter(earlier)
    if kind == "postgres":
        with psycopg.connect(postgres.conninfo) as connection:
            assert connection.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] == 0
    if kind == "parquet":
        assert not list((tmp_path / "output" / "_staging").glob("*")), "lingering staged files were not aborted"


def test_a_function_sink_appending_is_at_least_once(tmp_path):
    """The difference a transactional sink makes: killed after statekit's checkpoint and the append
    but before Spark committed the micro-batch, the replay appends the batch's output again."""
    epochs = _write_source(tmp_path)
    killed = _run(tmp_path, "heap", f"sink:{KILLED_BATCH}", "append")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    restarted = _run(tmp_path, "heap", "none", "append")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    found, expected = _output("append", tmp_path, None), _failure_free(epochs)
    replayed = Counter(expected_outputs(epochs[KILLED_BATCH], [r for e in epochs[:KILLED_BATCH] for r in e]))
    assert found == expected + replayed  # every row of the replayed micro-batch twice
