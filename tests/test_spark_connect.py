"""Every statekit entry point on Spark Connect: ``jobs/connect_client.py`` is a Connect client
(``SparkSession.builder.remote("local[2]")``, which starts a local Connect server in a JVM of
its own) run twice, the second time as a restart of client and server; each entry point's
result is compared here with a plain-Python oracle, and the keyed job with the same job run on
this session's classic SparkSession, which must end with identical state.

The two client runs are shared by the module (one Connect server each, ~20 s to start). The
conformance suite's Spark level runs on Connect too (``--statekit-spark-connect``): here the heap
backend's, with both storages, as the representative set; any backend's runs the same way
(``pytest --statekit-spark-connect tests/test_conformance_rocksdb.py -k Spark``).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import connect_jobs as jobs
from killable import job_env
from statekit.conformance_tests.compare import assert_same_rows, assert_same_state
from statekit.conformance_tests.spark import OUTPUT, SCHEMA
from statekit.conformance_tests.timer_workload import timer_oracle
from statekit.conformance_tests.workload import WorkloadFunction, dump_state, expected_outputs, expected_state
from statekit.spark import StatekitConf, latest_checkpoint, process_keyed

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLIENT = Path(__file__).parent / "jobs" / "connect_client.py"
EXITING_CLIENT = Path(__file__).parent / "jobs" / "connect_exit.py"
ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def connect_work(tmp_path_factory) -> Path:
    """The work directory of the two Connect client runs, once both ran."""
    work = tmp_path_factory.mktemp("connect")
    for phase in ("first", "second"):
        done = subprocess.run([sys.executable, str(CLIENT), str(work), phase], env=job_env(), capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0 and (work / f"{phase}.json").exists(), \
            f"the {phase} Connect client failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return work


def _result(work: Path, phase: str, step: str) -> Any:
    recorded = json.loads((work / f"{phase}.json").read_text())[step]
    assert "error" not in recorded, f"{step} ({phase} run) failed on Connect: {recorded['traceback']}"
    return recorded["result"]


def _outputs(epoch_outputs: list) -> list[list[tuple]]:
    return [[tuple(row) for row in rows] for rows in epoch_outputs]


def _check_workload(outputs: list[list[tuple]], epochs: list[list[tuple]], history: list[tuple], what: str) -> None:
    for number, (found, rows) in enumerate(zip(outputs, epochs, strict=True)):
        assert_same_rows(found, expected_outputs(rows, history), f"{what}, epoch {number + 1}")
        history.extend(rows)


def _state(spark, work: Path, job: str, checkpoint_id: int, parallelism: int, backend: str) -> dict:
    """Job ``job``'s state in its latest checkpoint (checked to be ``checkpoint_id``, at ``parallelism``)."""
    conf = StatekitConf.parse({**jobs.settings(work), "backend": backend})
    latest, streams = latest_checkpoint(spark, job, conf)
    assert latest.checkpoint_id == checkpoint_id, f"job {job!r}: latest checkpoint {latest.checkpoint_id}"
    assert latest.metadata.operator("keyed-process").parallelism == parallelism
    assert latest.metadata.properties["backend"] == backend
    return dump_state(latest.metadata, streams, str(work / f"dump-{job}-{checkpoint_id}"),
                      state_backend=conf.create_backend())


def test_process_keyed_restarts_and_rescales_with_the_state_of_a_classic_run(connect_work, spark, statekit_settings,
                                                                              tmp_path):
    """Two epochs at parallelism 2, a restart of client and Connect server, a third epoch at 3:
    every epoch's output and the final state are the oracle's, and the same job on the classic
    session ends with the same state and outputs."""
    epochs = jobs.epochs()
    outputs = _outputs(_result(connect_work, "first", "keyed")) + _outputs(_result(connect_work, "second", "keyed"))
    _check_workload(outputs, epochs, [], "process_keyed on Connect")
    connect_state = _state(spark, connect_work, "keyed", 3, 3, "rocksdb")
    assert_same_state(connect_state, expected_state([row for rows in epochs for row in rows]), "Connect, checkpoint 3")

    statekit_settings({**jobs.settings(tmp_path), "backend": "rocksdb"})
    classic_outputs = []
    for number, rows in enumerate(epochs):
        statekit_settings(parallelism=2 if number < 2 else 3)
        df = spark.createDataFrame(rows, SCHEMA).coalesce(1)
        classic_outputs.append([tuple(r) for r in process_keyed(df, "key", WorkloadFunction(), OUTPUT,
                                                                job_id="keyed").collect()])
    assert_same_state(_state(spark, tmp_path, "keyed", 3, 3, "rocksdb"), connect_state,
                      "the classic run's state against the Connect run's")
    for number, (classic, connect) in enumerate(zip(classic_outputs, outputs)):
        assert_same_rows(classic, connect, f"epoch {number + 1} on classic against Connect")


def test_defaults_come_from_the_connect_session(connect_work):
    """No parallelism and no job id set: Spark's default parallelism (local[2]: 2) and the
    application name, found through conf and a DataFrame."""
    assert _result(connect_work, "first", "defaults") == 2


def test_latest_checkpoint_savepoint_and_a_backend_switch(connect_work, spark):
    epochs = jobs.epochs()
    assert _result(connect_work, "first", "latest_checkpoint") == 2
    url = _result(connect_work, "first", "savepoint")
    assert url.startswith((connect_work / "savepoints").as_uri()), url
    history = [row for rows in epochs[:2] for row in rows]
    _check_workload(_outputs(_result(connect_work, "second", "backend_switch")), epochs[2:], history,
                    "restored from the savepoint into heap")
    assert_same_state(_state(spark, connect_work, "switched", 3, 3, "heap"), expected_state(history),
                      "rocksdb -> heap through a savepoint, rescaled 2 -> 3")


def test_vector_functions(connect_work):
    _check_workload(_outputs(_result(connect_work, "first", "vector")), jobs.epochs()[:2], [], "a vector function")


def test_pre_aggregation(connect_work):
    found = sorted(tuple(row) for row in _result(connect_work, "first", "pre_aggregation"))
    assert found == jobs.pre_aggregated_oracle(jobs.epochs()[0])


def test_event_time_and_timers(connect_work):
    expected = timer_oracle(jobs.timed_epochs())
    for number, found in enumerate(_outputs(_result(connect_work, "first", "timers"))):
        assert_same_rows(found, expected[number], f"timers, epoch {number + 1}")


def test_write_savepoint_and_the_state_data_source(connect_work):
    bootstrapped = _result(connect_work, "first", "write_savepoint")
    assert sorted(tuple(row) for row in bootstrapped["output"]) == jobs.bootstrap_oracle()
    assert sorted(tuple(row) for row in bootstrapped["state"]) == sorted(jobs.BOOTSTRAP), \
        "format('statekit') read the bootstrapped savepoint"


def test_the_metadata_and_state_data_sources(connect_work):
    assert sorted(tuple(row) for row in _result(connect_work, "first", "metadata_source")) == \
        [(1, "rocksdb", 2), (2, "rocksdb", 2)]
    by_state = dict(tuple(row) for row in _result(connect_work, "first", "state_source"))
    keys = expected_state([row for rows in jobs.epochs()[:2] for row in rows])
    assert by_state["count"] == len(keys), f"one count per key: {by_state}"


def test_a_stream_into_a_transactional_sink_is_exactly_once_across_a_restart(connect_work, spark):
    """Two micro-batches, a restart of client and server, the third: the sink holds each output
    row once, and the state is the oracle's."""
    epochs = jobs.epochs()
    assert _result(connect_work, "first", "stream_sink") == 1
    assert _result(connect_work, "second", "stream_sink") == 2
    written = pq.read_table(connect_work / "sink-output").to_pylist()
    expected: list[tuple] = []
    history: list[tuple] = []
    for rows in epochs:
        expected += expected_outputs(rows, history)
        history += rows
    assert_same_rows([(r["key"], r["count"]) for r in written], expected, "the sink's rows")
    assert_same_state(_state(spark, connect_work, "stream-sink", 3, 2, "heap"), expected_state(history),
                      "the stream's checkpoint 3")


def test_a_stream_into_a_function_sink(connect_work):
    """The sink function runs in the Connect server's Python process, with each micro-batch's output."""
    assert _result(connect_work, "first", "stream_function") == 1
    written = pq.read_table(connect_work / "function-output").to_pylist()
    history: list[tuple] = []
    for batch, rows in enumerate(jobs.epochs()[:2]):
        assert_same_rows([(r["key"], r["count"]) for r in written if r["batch"] == batch],
                         expected_outputs(rows, history), f"micro-batch {batch}")
        history += rows


def test_a_streams_progress_carries_statekits_metrics_on_connect(connect_work):
    """``lastProgress`` and ``recentProgress`` of a Connect query: the metrics of each micro-batch,
    run in the server's Python process, read back by the client from the checkpoints."""
    progress = _result(connect_work, "first", "stream_progress")
    history: list[tuple] = []
    for batch, (rows, metrics) in enumerate(zip(jobs.epochs()[:2], progress, strict=True)):
        assert metrics["batch_id"] == batch and metrics["checkpoint_id"] == batch + 1, metrics
        assert (metrics["rows_in"], metrics["keys_touched"], metrics["keys_exact"]) == \
            (len(rows), len({row[0] for row in rows}), True), f"micro-batch {batch}: {metrics}"
        assert metrics["rows_out"] == len(expected_outputs(rows, history)), f"micro-batch {batch}: {metrics}"
        history += rows
        assert metrics["state_entries_exact"] and metrics["state_entries"] > 0 and metrics["timers_pending"] == 0


def test_a_stream_with_event_time_fires_the_oracles_windows(connect_work):
    """Watermarks per micro-batch from the earlier ones' event times; the windows' event-time timers
    fire as the oracle's do (its processing-time timers are a minute out, past the query's run)."""
    assert _result(connect_work, "first", "stream_event_time") == len(jobs.timed_epochs()) - 1
    written = [tuple(r.values()) for r in pq.read_table(connect_work / "timed-output").to_pylist()]
    expected = [row for rows in timer_oracle(jobs.timed_epochs()) for row in rows if row[0] == "window"]
    assert expected, "the oracle closes windows"
    assert_same_rows(written, expected, "the stream's window outputs")


def test_a_statekit_error_in_a_task_reaches_the_client_as_itself(connect_work):
    recorded = json.loads((connect_work / "first.json").read_text())["worker_error"]
    assert "result" not in recorded, "a function returning a float for a bigint column ran on Connect"
    assert recorded["error"].startswith("FunctionResultError: WrongType returned float 1.5 for output column 'count'"), \
        recorded["error"]
    assert "raised in a Spark task" in recorded["error"]


def test_a_client_that_ends_without_stopping_its_session_exits(tmp_path):
    """PySpark's Connect client releases a checkpointed DataFrame from its finalizer with a gRPC
    call that never returns at interpreter exit: a script whose statekit result was alive at its
    end, without ``spark.stop()``, hung there."""
    done = subprocess.run([sys.executable, str(EXITING_CLIENT), str(tmp_path)], env=job_env(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "rows 100" in done.stdout, \
        f"the client did not end cleanly (exit code {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_the_jobmanager_storage_is_refused_for_a_stream_naming_the_storage_to_use(connect_work):
    recorded = json.loads((connect_work / "first.json").read_text())["jobmanager_refused"]
    assert "result" not in recorded, "a stream with the jobmanager storage ran on Connect"
    assert recorded["error"].startswith("ConfigurationError: the checkpoint storage 'jobmanager'"), recorded["error"]
    assert "spark.statekit.checkpoint.storage=filesystem" in recorded["error"]


def test_the_conformance_suites_spark_level_passes_on_connect():
    """The heap backend's Spark level (checkpoints, a retried task, a restart, a restarted stream,
    local recovery, rescales, backend switches through savepoints; filesystem and jobmanager
    storages) on a Connect session of its own pytest process (one Connect server for all)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--statekit-spark-connect", "tests/test_conformance_heap.py",
                           "-k", "Spark", "-q", "-p", "no:cacheprovider"], cwd=ROOT, env=job_env(),
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"the Spark level failed on Connect:\n{done.stdout[-6000:]}"
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary
