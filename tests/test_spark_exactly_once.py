"""Exactly-once guards of the Spark runner, in a real SparkSession:

* no silent rollback: a micro-batch never restores older state than Spark's commit log says
  was committed (a deleted ``_metadata``, the ``jobmanager`` storage after a driver restart), while
  the normal cases keep working: a replayed micro-batch with ``num-retained=1``, a query restarted
  from a savepoint with a new checkpoint location (and its first micro-batch replayed);
* job fencing: two concurrent runs of one job end in a clear error and the state of one of them,
  never a merge; another query or a bounded run does not continue a query's job unless told to.

A crash and restart of a streaming query is tests/test_spark_query_restart.py."""
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from pyspark import cloudpickle

from statekit.conformance_tests.spark import OUTPUT, ROWS_PER_EPOCH, SCHEMA, SparkJobs, epochs
from statekit.conformance_tests.workload import WorkloadFunction, expected_state
from statekit.spark import checkpoints, process_keyed, process_keyed_stream
from statekit.spi.errors import JobOwnershipError
from test_canonical_format import renumber_last_key_group

pytestmark = [pytest.mark.spark, pytest.mark.slow]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # BlockUntil runs in the executors' workers


@pytest.fixture
def jobs(spark, statekit_settings, tmp_path):
    statekit_settings({"checkpoint.storage": "filesystem", "checkpoint.dir": (tmp_path / "checkpoints").as_uri(),
                       "parallelism": 2, "max-parallelism": 128, "local.dir": str(tmp_path / "local"),
                       "savepoint.dir": (tmp_path / "savepoints").as_uri()})
    return SparkJobs(spark, statekit_settings, tmp_path)


def _rows(batches):
    return [row for rows in batches for row in rows]


def _uncommit(query_checkpoint: Path, batch: int) -> None:
    """Make Spark replay micro-batch ``batch`` on the next start (as after a crash before its commit)."""
    for name in (str(batch), f".{batch}.crc"):
        os.remove(query_checkpoint / "commits" / name)


def test_a_deleted_latest_checkpoint_fails_the_next_micro_batch_instead_of_rolling_back(jobs, spark, tmp_path):
    batches = epochs(4, seed=700)
    query_checkpoint = tmp_path / "query"
    assert [b for b, _ in jobs.stream("rollback", batches[:3], str(query_checkpoint))] == [0, 1, 2]
    job_dir = tmp_path / "checkpoints" / jobs.job_id("rollback")
    os.remove(job_dir / "chk-3" / "_metadata")  # checkpoint 3 (micro-batch 2) is lost; Spark committed batch 2
    with pytest.raises(Exception) as caught:
        jobs.stream("rollback", batches, str(query_checkpoint))
    message = str(caught.value)
    for part in ("refusing to roll back", str(query_checkpoint), "micro-batch 2 was committed", str(job_dir),
                 "completed checkpoints are [1, 2]", "spark.statekit.restore.path", "chk-2"):
        assert part in message, f"{part!r} not in: {message[-3000:]}"
    jobs.configure({"restore.path": (job_dir / "chk-2").as_uri()})  # continue from checkpoint 2 deliberately
    assert jobs.stream("rollback", batches, str(query_checkpoint)) == [(3, ROWS_PER_EPOCH)]
    assert jobs.check_checkpoint("rollback", _rows([batches[0], batches[1], batches[3]])) == 4


def test_a_deleted_latest_checkpoint_fails_the_next_bounded_run_instead_of_rolling_back(jobs, spark, tmp_path):
    """A bounded job has no commit log of Spark's: the job's owner record keeps its latest commit."""
    batches, history = epochs(4, seed=705), []
    for rows in batches[:3]:
        jobs.run_epoch("bounded-rollback", rows, history)
    job_dir = tmp_path / "checkpoints" / jobs.job_id("bounded-rollback")
    os.remove(job_dir / "chk-3" / "_metadata")
    with pytest.raises(Exception) as caught:
        jobs.run_epoch("bounded-rollback", batches[3], list(history))
    message = str(caught.value)
    for part in ("refusing to roll back", "checkpoint 3 was committed", "latest completed checkpoint is 2",
                 f"spark.statekit.restore.path={(job_dir / 'chk-2').as_uri()}"):
        assert part in message, f"{part!r} not in: {message[-3000:]}"
    jobs.configure({"restore.path": (job_dir / "chk-2").as_uri()})  # continue from checkpoint 2 deliberately
    history = _rows(batches[:2])
    assert jobs.run_epoch("bounded-rollback", batches[3], history) == 3
    assert jobs.run_epoch("bounded-rollback", batches[0], history) == 4  # later runs go on from their own


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_renumbered_key_group_index_is_refused_by_the_restoring_task(jobs, backend, tmp_path):
    """The task checks each restored key against the key group its index entry claims, hashing
    it as Spark does for the job's key columns; before, the key group's keys were restored under
    the other key group, where no lookup found them."""
    jobs.configure({"backend": backend})
    few_keys = [row for row in epochs(1, seed=790)[0] if row[0] in {f"key-{i}" for i in range(12)}]
    jobs.run_epoch("renumbered", few_keys, [])  # key groups left free to renumber one into
    job_dir = tmp_path / "checkpoints" / jobs.job_id("renumbered")
    original, renumbered = renumber_last_key_group(job_dir / "chk-1" / "_metadata")
    with pytest.raises(Exception, match=rf"key group {renumbered} of .* holds the key .* which belongs to key group "
                                        rf"{original}: its handle's key-group index was changed"):
        jobs.run_epoch("renumbered", epochs(2, seed=790)[1], [])


def test_num_retained_1_still_replays_a_micro_batch_exactly_once(jobs, tmp_path):
    jobs.configure({"checkpoint.num-retained": 1})
    batches = epochs(3, seed=710)
    query_checkpoint = tmp_path / "query"
    jobs.stream("retain-one", batches, str(query_checkpoint))
    _uncommit(query_checkpoint, 2)
    assert jobs.stream("retain-one", batches, str(query_checkpoint)) == [(2, ROWS_PER_EPOCH)]
    assert jobs.check_checkpoint("retain-one", _rows(batches)) == 3


def test_a_query_restarted_from_a_savepoint_with_a_new_checkpoint_location(jobs, spark, tmp_path):
    batches = epochs(3, seed=720)
    jobs.stream("before", batches[:2], str(tmp_path / "old-query"))
    jobs.configure({"restore.path": jobs.savepoint("before")})
    new_query = tmp_path / "new-query"
    assert jobs.stream("after", batches[2:], str(new_query)) == [(0, ROWS_PER_EPOCH)]
    assert jobs.check_checkpoint("after", _rows(batches)) == 1
    # its first micro-batch replayed after the setting was removed: it restores what its first attempt did
    spark.conf.unset("spark.statekit.restore.path")
    _uncommit(new_query, 0)
    assert jobs.stream("after", batches[2:], str(new_query)) == [(0, ROWS_PER_EPOCH)]
    assert jobs.check_checkpoint("after", _rows(batches)) == 1


def test_a_replayed_first_micro_batch_restores_the_checkpoint_its_first_attempt_did(jobs, tmp_path):
    """restore.path may name a job directory (its latest checkpoint). A replay of the first
    micro-batch restores the checkpoint the first attempt restored, not the job's newest one
    since: the source job went on to checkpoint 3 meanwhile."""
    batches = epochs(4, seed=750)
    source_query = str(tmp_path / "source-query")
    jobs.stream("source", batches[:2], source_query)
    jobs.configure({"restore.path": (tmp_path / "checkpoints" / jobs.job_id("source")).as_uri()})
    fork_query = tmp_path / "fork-query"
    assert jobs.stream("fork", batches[3:], str(fork_query)) == [(0, ROWS_PER_EPOCH)]
    assert jobs.check_checkpoint("fork", _rows([batches[0], batches[1], batches[3]])) == 1
    jobs.stream("source", batches[:3], source_query)  # the source job's latest checkpoint is now 3
    _uncommit(fork_query, 0)
    assert jobs.stream("fork", batches[3:], str(fork_query)) == [(0, ROWS_PER_EPOCH)]
    assert jobs.check_checkpoint("fork", _rows([batches[0], batches[1], batches[3]])) == 1


def test_a_no_claim_restore_of_the_jobs_own_checkpoint_is_never_deleted(jobs, tmp_path):
    """README: restore.mode no-claim never deletes the restored files (the local runner keeps them,
    tests/test_storage_scenarios.py); here the restore path is the job's own chk-2 after chk-3 was lost."""
    batches = epochs(6, seed=760)
    query_checkpoint = str(tmp_path / "query")
    jobs.stream("own-restore", batches[:3], query_checkpoint)
    job_dir = tmp_path / "checkpoints" / jobs.job_id("own-restore")
    os.remove(job_dir / "chk-3" / "_metadata")
    jobs.configure({"restore.path": (job_dir / "chk-2").as_uri()})  # no-claim is the default
    jobs.stream("own-restore", batches, query_checkpoint)  # micro-batches 3, 4, 5: epochs 4, 5, 6
    assert jobs.check_checkpoint("own-restore", _rows(batches[:2] + batches[3:])) == 6
    assert (job_dir / "chk-2" / "_metadata").exists(), "retention deleted the checkpoint restored in no-claim mode"


def test_a_driver_restart_with_the_jobmanager_storage_is_refused(jobs, spark, tmp_path):
    spark.conf.unset("spark.statekit.checkpoint.dir")
    jobs.configure({"checkpoint.storage": "jobmanager"})
    batches = epochs(3, seed=730)
    query_checkpoint = tmp_path / "query"
    jobs.stream("in-memory", batches[:2], str(query_checkpoint))
    del checkpoints._DRIVER_MEMORY_ACCESSES[jobs.job_id("in-memory")]  # what a new driver process has
    with pytest.raises(Exception) as caught:
        jobs.stream("in-memory", batches, str(query_checkpoint))
    message = str(caught.value)
    for part in ("refusing to roll back", "micro-batch 1 was committed", "it has no completed checkpoint",
                 "driver memory", "spark.statekit.restore.path"):
        assert part in message, f"{part!r} not in: {message[-3000:]}"


def test_another_query_or_a_bounded_run_does_not_continue_a_querys_job(jobs, spark, tmp_path):
    batches = epochs(3, seed=740)
    first_query = tmp_path / "first-query"
    jobs.stream("owned", batches[:1], str(first_query))
    query_id = (first_query / "metadata").read_text().split('"')[3]
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "source-owned"))
    with pytest.raises(JobOwnershipError) as caught:  # refused before the second query starts
        process_keyed_stream(stream, "key", WorkloadFunction(), OUTPUT, lambda out, batch_id: None,
                             checkpoint_location=str(tmp_path / "second-query"), job_id=jobs.job_id("owned"))
    message = str(caught.value)
    for part in (f"streaming query {query_id}", "a new streaming query", str(tmp_path / "second-query"),
                 "spark.statekit.job-id", "spark.statekit.job.take-over=true"):
        assert part in message, f"{part!r} not in: {message}"
    history = _rows(batches[:1])
    with pytest.raises(JobOwnershipError, match=f"belongs to streaming query {query_id}.*this run is bounded runs"):
        jobs.run_epoch("owned", batches[1], history)
    jobs.configure({"job.take-over": "true"})
    assert jobs.run_epoch("owned", batches[1], history) == 2  # continued deliberately
    with pytest.raises(Exception, match="would replace them"):  # the first query's micro-batch 1 would be epoch 2
        jobs.stream("owned", batches[:1] + batches[2:], str(first_query))
    assert jobs.check_checkpoint("owned", history) == 2


class BlockUntil(WorkloadFunction):
    """The workload, holding its first row until ``release`` exists (after creating ``started``)."""

    def __init__(self, started: str, release: str) -> None:
        self.started, self.release = started, release

    def process(self, row, ctx):
        if not os.path.exists(self.started):
            Path(self.started).touch()
            deadline = time.monotonic() + 300
            while not os.path.exists(self.release) and time.monotonic() < deadline:
                time.sleep(0.1)
        yield from super().process(row, ctx)


def test_two_concurrent_runs_end_in_a_clear_error_and_never_a_merged_state(jobs, spark, tmp_path):
    jobs.configure(parallelism=1)
    first, concurrent, second = epochs(3, seed=750)
    history = []
    jobs.run_epoch("fenced", first, history)
    started, release = tmp_path / "started", tmp_path / "release"
    failures = []

    def older_run():
        df = spark.createDataFrame(concurrent, SCHEMA).coalesce(1)
        try:
            process_keyed(df, "key", BlockUntil(str(started), str(release)), OUTPUT,
                          job_id=jobs.job_id("fenced")).collect()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            failures.append(exc)

    thread = threading.Thread(target=older_run)
    thread.start()
    deadline = time.monotonic() + 300
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started.exists(), "the older run's task never started"
    jobs.run_epoch("fenced", second, history)  # a newer run of the same job commits checkpoint 2
    release.touch()
    thread.join(600)
    assert len(failures) == 1 and isinstance(failures[0], JobOwnershipError), failures
    assert "was taken over by run" in str(failures[0]) and "stop one of the two" in str(failures[0])
    assert jobs.check_checkpoint("fenced", history) == 2  # the newer run's state: first + second only
    assert expected_state(history) != expected_state(first + concurrent + second)
