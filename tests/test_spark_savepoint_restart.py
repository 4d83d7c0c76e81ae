"""A job started from a savepoint (a backend switch and a rescale) whose driver is killed
(SIGKILL) right after its first commit, then restarted with the same settings: the restarted
driver still has ``spark.statekit.restore.path`` pointing at the savepoint, while the job now has a
completed checkpoint of its own. As in Flink, a job with checkpoints of its own continues from its
latest one; the savepoint only seeds a job that has none (``spark.restore_point``). Issue 42 (item
4) saw the restarted jobs lose everything from before the savepoint.

heap p4 -> savepoint -> RocksDB p3 (killed after its first commit, restarted) -> savepoint -> LMDB
p2 (the same), bounded epochs on ``local[2,3]``; every epoch's output and every checkpoint's state
is compared with the plain-Python oracle, every key and every value. The killed driver is a process
of its own; the restarted one is this test's session (statekit keeps nothing of a job in a driver
between runs, with a durable storage). The restarted RocksDB job
reopens the killed driver's working state (local recovery, the same machine); the restarted LMDB
job restores its checkpoint from storage (other executors)."""
import shutil
import signal

import pyarrow.parquet as pq
import pytest

from statekit.conformance_tests.compare import assert_same_rows, assert_same_state
from statekit.conformance_tests.spark import SparkJobs
from statekit.conformance_tests.workload import dump_state, expected_outputs, expected_state, make_rows
from statekit.spark import StatekitConf, latest_checkpoint

from killable import run_bounded_epoch, run_killable, write_micro_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]
#: each job restored from the previous job's savepoint: (backend, parallelism, whether the restarted
#: driver's executors find the killed one's working state: the same machine, or other ones)
SWITCHES = (("rocksdb", 3, True), ("lmdb", 2, False))


def test_a_restart_right_after_the_first_commit_after_a_savepoint_switch(spark, statekit_settings, tmp_path):
    common = {"checkpoint.storage": "filesystem", "checkpoint.dir": (tmp_path / "checkpoints").as_uri(),
              "checkpoint.incremental": "true", "max-parallelism": 128, "local.dir": str(tmp_path / "local"),
              "savepoint.dir": (tmp_path / "savepoints").as_uri()}
    statekit_settings({**common, "backend": "heap", "parallelism": 4})
    jobs = SparkJobs(spark, statekit_settings, tmp_path)
    batches = iter([make_rows(2000, 500, seed) for seed in range(4200, 4206)])
    history: list = []
    assert [jobs.run_epoch("heap", next(batches), history) for _ in range(2)] == [1, 2]
    url = jobs.savepoint("heap")
    for backend, parallelism, same_machine in SWITCHES:
        settings = {**common, "backend": backend, "parallelism": parallelism, "restore.path": url}
        rows = next(batches)
        killed, output = run_bounded_epoch(tmp_path, jobs.job_id(backend), rows, "after-commit", settings)
        assert killed.returncode == -signal.SIGKILL, f"the driver was not killed:\n{killed.stderr[-3000:]}"
        assert_same_rows(output, expected_outputs(rows, history), f"outputs of {backend}'s first epoch")
        history.extend(rows)
        first = len(history) // 2000  # checkpoint ids continue after the savepoint's
        statekit_settings(settings)  # the restarted driver's: the same, restore.path included
        assert jobs.check_checkpoint(backend, history) == first, "the killed driver's commit"
        if not same_machine:
            shutil.rmtree(tmp_path / "local" / jobs.job_id(backend))
        assert jobs.run_epoch(backend, next(batches), history) == first + 1, \
            "the restarted job did not continue from its own checkpoint"
        recovery = jobs.latest(backend)[0].metadata.properties["recovery"]
        assert set(recovery.values()) == {"local" if same_machine else "storage"}, recovery
        url = jobs.savepoint(backend)


def test_a_replay_right_after_the_first_commit_of_a_query_started_from_a_savepoint(spark, statekit_settings,
                                                                                   tmp_path):
    """Streaming: a heap p4 query (this session) -> savepoint -> a RocksDB p3 query with its own
    checkpointLocation and job id, whose driver is killed after statekit committed the checkpoint of
    its first micro-batch and before Spark committed the micro-batch; started again with the same
    settings, Spark replays micro-batch 0, which must restore the savepoint again (its first
    attempt's restore point), not the job's own checkpoint 1 that it replaces, then goes on."""
    statekit_settings({"checkpoint.storage": "filesystem", "checkpoint.dir": (tmp_path / "checkpoints").as_uri(),
                       "checkpoint.incremental": "true", "max-parallelism": 128, "backend": "heap", "parallelism": 4,
                       "local.dir": str(tmp_path / "local"), "savepoint.dir": (tmp_path / "savepoints").as_uri()})
    jobs = SparkJobs(spark, statekit_settings, tmp_path)
    batches = [make_rows(1500, 400, seed) for seed in range(4300, 4304)]
    assert jobs.stream("heap", batches[:2], str(tmp_path / "heap-query")) == [(0, 1500), (1, 1500)]
    settings = ("max-parallelism=128", "parallelism=3", f"restore.path={jobs.savepoint('heap')}")
    work = tmp_path / "rocksdb"
    write_micro_batches(work, batches[2:])
    killed = run_killable(work, "rocksdb", "sink:0", "workload", "overwrite", "local[2,3]", *settings)
    assert killed.returncode == -signal.SIGKILL, f"the driver was not killed:\n{killed.stderr[-3000:]}"
    assert (work / "checkpoints" / "killable" / "chk-1" / "_metadata").exists(), "statekit did not commit epoch 1"
    assert not (work / "spark-checkpoint" / "commits" / "0").exists(), "Spark committed micro-batch 0"
    restarted = run_killable(work, "rocksdb", "none", "workload", "overwrite", "local[2,3]", *settings)
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    for batch in (0, 1):  # micro-batch 0's output is the replay's
        table = pq.read_table(work / "output" / f"batch-{batch}")
        assert_same_rows(zip(table["key"].to_pylist(), table["count"].to_pylist()),
                         expected_outputs(batches[2 + batch], [r for rows in batches[:2 + batch] for r in rows]),
                         f"outputs of micro-batch {batch}")
    conf = StatekitConf.parse({"backend": "rocksdb", "checkpoint.storage": "filesystem",
                               "checkpoint.dir": (work / "checkpoints").as_uri()})
    latest, streams = latest_checkpoint(spark, "killable", conf)
    assert latest.checkpoint_id == 2
    found = dump_state(latest.metadata, streams, str(tmp_path / "dump"), state_backend=conf.create_backend())
    assert_same_state(found, expected_state([r for rows in batches for r in rows]), "checkpoint 2 of the query")
