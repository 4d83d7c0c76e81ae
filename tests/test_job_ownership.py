"""Job fencing and identity without Spark (the local runner, the checkpoint layer): the newest run
of a job owns it, an older run that is still writing fails at its commit without touching the
owner's files, a restart after a crash takes over, and a job written by a streaming query is
not continued by bounded runs unless told to. The same under Spark: tests/test_spark_exactly_once.py."""
import json

import pytest

from statekit.checkpoint.ownership import BOUNDED, JobOwnership, streaming_query
from statekit.checkpoint.store import CheckpointStore
from statekit.conformance_tests.workload import WorkloadFunction, dump_state, expected_state, make_rows
from statekit.runtime import LocalRunner
from statekit.spi.errors import JobOwnershipError, RestoreError
from statekit.storage.filesystem import FileSystemCheckpointStorage

JOB = "owned-job"


def _runner(storage):
    return LocalRunner(WorkloadFunction(), key_selector=lambda row: row[0], parallelism=2, storage=storage,
                       job_id=JOB, num_retained=5)


def _state(runner, tmp_path):
    return dump_state(runner.latest_metadata(), runner.streams, str(tmp_path / "dump"))


def test_an_older_run_still_writing_is_fenced_and_the_state_is_the_new_owners(tmp_path):
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0)
    first_rows, old_rows, new_rows = make_rows(300, 40, 1), make_rows(300, 40, 2), make_rows(300, 40, 3)
    old = _runner(storage)
    old.run_epoch(first_rows)
    new = _runner(storage)  # a second run of the same job starts while the first still runs
    with pytest.raises(JobOwnershipError) as caught:
        old.run_epoch(old_rows)
    message = str(caught.value)
    assert new.ownership.run.run_id in message and old.ownership.run.run_id in message, message
    assert "stop one of the two" in message, message
    new.run_epoch(new_rows)
    fresh = _runner(storage)
    assert [c.checkpoint_id for c in fresh.store.completed()] == [1, 2]
    assert _state(fresh, tmp_path) == expected_state(first_rows + new_rows), "the old run's epoch reached the state"


def test_a_restart_after_a_crash_takes_the_job_over(tmp_path):
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0)
    rows = [make_rows(200, 30, seed) for seed in (4, 5, 6)]
    crashed = _runner(storage)
    crashed.run_epoch(rows[0])
    crashed.run_epoch(rows[1])
    del crashed  # the process died: nothing is released
    restarted = _runner(storage)
    restarted.run_epoch(rows[2])
    assert restarted.latest_metadata().checkpoint_id == 3
    assert _state(restarted, tmp_path) == expected_state(rows[0] + rows[1] + rows[2])


def test_bounded_runs_do_not_continue_a_streaming_querys_job(tmp_path):
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0)
    access = storage.create_access(JOB)
    query = JobOwnership(access, JOB, streaming_query("4b1c-query", str(tmp_path / "query-checkpoint")))
    store = CheckpointStore(access, ownership=query)
    query.begin_epoch(None)
    seed = _runner(FileSystemCheckpointStorage(str(tmp_path / "seed"), memory_threshold=0))
    seed.run_epoch(make_rows(50, 10, 7))
    store.add(seed.latest_metadata())  # checkpoint 1, written by the query
    with pytest.raises(JobOwnershipError) as caught:
        _runner(storage)
    message = str(caught.value)
    for part in ("streaming query 4b1c-query", "bounded runs", "spark.statekit.job-id",
                 "spark.statekit.restore.path=", "spark.statekit.job.take-over=true"):
        assert part in message, f"{part!r} not in: {message}"
    taken = JobOwnership(access, JOB, BOUNDED, take_over=True)
    taken.begin_epoch(CheckpointStore(access).latest())  # explicitly allowed
    assert taken.holds()


def test_a_lost_latest_metadata_is_refused_not_rolled_back(tmp_path):
    """Issue: deleting the latest _metadata made the next run continue from the checkpoint before
    it, silently dropping an epoch. The owner record keeps the latest committed id."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0)
    rows = [make_rows(200, 30, seed) for seed in (7, 8, 9, 10)]
    first = _runner(storage)
    for batch in rows[:3]:
        first.run_epoch(batch)
    (tmp_path / "checkpoints" / JOB / "chk-3" / "_metadata").unlink()

    restarted = _runner(storage)
    with pytest.raises(RestoreError) as caught:
        restarted.run_epoch(rows[3])
    message = str(caught.value)
    assert "checkpoint 3 was committed" in message and "latest completed checkpoint is 2" in message, message
    assert "restore_from" in message, message
    with pytest.raises(RestoreError):  # a replay of the lost epoch is refused too
        restarted.run_epoch(rows[2], checkpoint_id=3)
    assert [c.checkpoint_id for c in _runner(storage).store.completed()] == [1, 2], "the refused run committed"

    # continuing from the older checkpoint on purpose: epoch 3's updates are lost, and later runs go on
    deliberate = _runner(storage)
    deliberate.restore_from(deliberate.store.latest().metadata, deliberate.streams)
    deliberate.run_epoch(rows[3])
    later = _runner(storage)
    later.run_epoch(rows[0])
    assert later.latest_metadata().checkpoint_id == 4
    assert _state(later, tmp_path) == expected_state(rows[0] + rows[1] + rows[3] + rows[0])


def test_an_owner_record_written_before_it_kept_commits_is_read(tmp_path):
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0)
    runner = _runner(storage)
    runner.run_epoch(make_rows(50, 10, 11))
    owner = tmp_path / "checkpoints" / JOB / "_owner"
    record = json.loads(owner.read_text())
    assert record["committed"] == 1
    del record["committed"]
    owner.write_text(json.dumps(record))
    restarted = _runner(storage)
    restarted.run_epoch(make_rows(50, 10, 12))
    assert restarted.ownership.owner().committed == 2
