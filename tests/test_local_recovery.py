"""Local recovery on an executor, driven without Spark: ``run_subtask`` is called exactly as the
Python worker calls it, and a small coordinator commits or drops each epoch's checkpoint.

Each epoch records how the subtask got its state (``parked``, ``local``, ``storage``, ``fresh``),
and the state of the last checkpoint is compared with the oracle on every key and value."""
from __future__ import annotations

import json
import multiprocessing
import os
import stat
import tempfile
import time

import pyarrow as pa
import pytest

from statekit.backends.common.local_dirs import acquire_lock, default_local_dir, release_lock
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.store import CheckpointStore
from statekit.conformance_tests.workload import (
    WorkloadFunction, dump_state, expected_key_state, make_rows, oracle,
)
from statekit.runtime import local_recovery
from statekit.spark.conf import StatekitConf
from statekit.spark.task import KEY_GROUP_COLUMN, SubtaskSpec, run_subtask
from statekit.spi import key_group_for_key
from statekit.spi.errors import StatekitError

JOB, OPERATOR, MAX_PARALLELISM = "local-recovery", "keyed-process", 128
SCHEMA = pa.schema([("key", pa.string()), ("count", pa.int64())])


class _Coordinator:
    """The driver's part: run epochs of one subtask (parallelism 1) and commit their checkpoints."""

    def __init__(self, tmp_path, backend: str, parallelism: int = 1, job: str = JOB, local: bool = True):
        self.parallelism, self.job = parallelism, job
        self.conf = StatekitConf.parse({"backend": backend, "checkpoint.storage": "filesystem",
                                        "checkpoint.dir": f"file://{tmp_path}/checkpoints",
                                        "checkpoint.incremental": "true",
                                        **({"local.dir": str(tmp_path / "local")} if local else {})})
        self.storage = self.conf.create_storage()
        self.backend = self.conf.create_backend()
        self.store = CheckpointStore(self.storage.create_access(job), 3)
        self.tmp_path = tmp_path

    def spec(self, epoch: int, function=None) -> SubtaskSpec:
        restore = self.store.latest_before(epoch)
        return SubtaskSpec(function or WorkloadFunction(), self.backend, self.storage, self.job, OPERATOR, epoch,
                           self.parallelism, MAX_PARALLELISM, ("key",), SCHEMA, True,
                           restore.metadata.to_bytes() if restore else None, None, self.conf.local_dir)

    def run(self, epoch: int, rows, *, commit: bool = True, function=None) -> str:
        """Run ``epoch`` over ``rows``, subtask by subtask; returns how the subtasks recovered
        (when all recovered alike, else a comma-separated list)."""
        acknowledgements: list[tuple] = []
        for index in range(self.parallelism):
            mine = [r for r in rows if key_group_for_key(r[0], MAX_PARALLELISM) * self.parallelism
                    // MAX_PARALLELISM == index]
            list(run_subtask(self.spec(epoch, function), index, iter([_batch(mine)]), acknowledgements.append))
        states = [SubtaskState.from_json(json.loads(payload)) for _, payload, *_ in acknowledgements]
        if commit:
            operator = OperatorState(OPERATOR, self.parallelism, MAX_PARALLELISM, tuple(states))
            self.store.add(CheckpointMetadata(epoch, self.job, {OPERATOR: operator}))
        else:
            self.store.abort(epoch, states)
        return ",".join(sorted({recovery for _, _, recovery, *_ in acknowledgements}))

    def state(self):
        latest = self.store.latest()
        return dump_state(latest.metadata, self.store.access.restore_streams(), str(self.tmp_path / "dump"),
                          state_backend=self.backend)


def _batch(rows) -> pa.RecordBatch:
    keys = [r[0] for r in rows]
    return pa.RecordBatch.from_pydict({
        "key": keys, "category": [r[1] for r in rows], "amount": [r[2] for r in rows],
        KEY_GROUP_COLUMN: pa.array([key_group_for_key(k, MAX_PARALLELISM) for k in keys], pa.int32())})


def _want(*epochs):
    return {k: expected_key_state(v) for k, v in oracle([r for e in epochs for r in e]).items()}


BACKENDS = ["heap", "rocksdb", "lmdb"]
#: how the next epoch recovers when the same worker ran the previous one
SAME_WORKER = {"heap": "parked", "rocksdb": "local", "lmdb": "local"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_next_epoch_reuses_the_working_state(tmp_path, backend):
    coordinator = _Coordinator(tmp_path, backend)
    epochs = [make_rows(400, 80, seed) for seed in (1, 2, 3)]
    assert coordinator.run(1, epochs[0]) == "fresh"
    assert coordinator.run(2, epochs[1]) == SAME_WORKER[backend]
    assert coordinator.run(3, epochs[2]) == SAME_WORKER[backend]
    assert coordinator.state() == _want(*epochs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_aborted_checkpoint_is_not_reused(tmp_path, backend):
    coordinator = _Coordinator(tmp_path, backend)
    epochs = [make_rows(300, 60, seed) for seed in (4, 5)]
    coordinator.run(1, epochs[0])
    coordinator.run(2, epochs[1], commit=False)  # e.g. another subtask failed: checkpoint 2 aborted
    assert coordinator.run(2, epochs[1]) == "storage", "state with epoch 2 applied must not be reused"
    assert coordinator.state() == _want(*epochs)


class _FailAfter(WorkloadFunction):
    def process(self, row, ctx):
        if self.processed == 50:
            raise RuntimeError("injected failure")
        yield from super().process(row, ctx)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_attempt_leaves_nothing_to_reuse(tmp_path, backend):
    coordinator = _Coordinator(tmp_path, backend)
    epochs = [make_rows(300, 60, seed) for seed in (6, 7)]
    coordinator.run(1, epochs[0])
    with pytest.raises(RuntimeError, match="injected failure"):
        coordinator.run(2, epochs[1], function=_FailAfter())
    assert coordinator.run(2, epochs[1]) == "storage", "the failed attempt's half-applied state was reused"
    assert coordinator.state() == _want(*epochs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_busy_slot_is_left_alone(tmp_path, backend):
    """Another process holds the subtask's slot (e.g. a speculative attempt): this one works in
    a private directory, restores from storage and removes the directory afterwards."""
    coordinator = _Coordinator(tmp_path, backend)
    epochs = [make_rows(300, 60, seed) for seed in (8, 9)]
    coordinator.run(1, epochs[0])
    operator_dir = tmp_path / "local" / JOB / OPERATOR
    slot = operator_dir / f"{backend}-subtask-0-of-1-max-{MAX_PARALLELISM}"
    lock = acquire_lock(str(slot), "the test's hold on the slot")
    try:
        assert coordinator.run(2, epochs[1]) == "storage"
    finally:
        release_lock(lock)
    assert sorted(p.name for p in operator_dir.iterdir()) == [slot.name], "the private directory was left behind"
    assert coordinator.state() == _want(*epochs)


def _run_first_epoch(tmp_path, backend, rows):
    _Coordinator(tmp_path, backend).run(1, rows)


@pytest.mark.parametrize("backend", ["rocksdb", "lmdb"])
def test_another_process_reopens_the_working_state(tmp_path, backend):
    """A Python worker ran epoch 1 and was killed; a new worker reopens its files from disk."""
    epochs = [make_rows(300, 60, seed) for seed in (10, 11)]
    child = multiprocessing.get_context("spawn").Process(target=_run_first_epoch, args=(tmp_path, backend, epochs[0]))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    coordinator = _Coordinator(tmp_path, backend)
    assert coordinator.run(2, epochs[1]) == "local"
    assert coordinator.state() == _want(*epochs)


def test_heap_state_parked_by_another_process_is_restored_from_storage(tmp_path):
    coordinator = _Coordinator(tmp_path, "heap")
    epochs = [make_rows(300, 60, seed) for seed in (12, 13)]
    coordinator.run(1, epochs[0])
    parked = local_recovery._PARKED.copy()
    local_recovery._PARKED.clear()  # as if epoch 1 had run in another worker
    try:
        assert coordinator.run(2, epochs[1]) == "storage"
    finally:
        for backend in parked.values():
            backend.keyed.dispose()
    assert coordinator.state() == _want(*epochs)


def test_a_working_state_of_an_earlier_job_with_the_same_id_is_not_reused(tmp_path):
    """The job's checkpoints were deleted and the job started again under the same id: the old
    working state says "checkpoint 1" too, but it is not the new checkpoint 1."""
    coordinator = _Coordinator(tmp_path, "rocksdb")
    old = make_rows(300, 60, 14)
    coordinator.run(1, old)
    coordinator.run(2, make_rows(300, 60, 15))
    import shutil
    shutil.rmtree(tmp_path / "checkpoints")
    coordinator = _Coordinator(tmp_path, "rocksdb")
    epochs = [make_rows(300, 60, seed) for seed in (16, 17)]
    assert coordinator.run(1, epochs[0]) == "fresh"
    assert coordinator.run(2, epochs[1]) == "local"
    assert coordinator.state() == _want(*epochs)
    assert os.path.isdir(tmp_path / "local" / JOB / OPERATOR)


def test_switching_backends_on_the_same_machine_restores_from_storage(tmp_path):
    """LMDB's checkpoints restored by RocksDB: RocksDB must not resume LMDB's working directory."""
    epochs = [make_rows(300, 60, seed) for seed in (18, 19)]
    _Coordinator(tmp_path, "lmdb").run(1, epochs[0])
    coordinator = _Coordinator(tmp_path, "rocksdb")
    assert coordinator.run(2, epochs[1]) == "storage"
    assert coordinator.state() == _want(*epochs)


def test_parked_heap_restores_operator_state_as_storage_does(tmp_path):
    """Union list state goes to every subtask on every restore: a parked keyed backend must not
    keep a subtask's operator state to itself."""
    def operator_states(coordinator):
        from statekit.backends.heap import HeapStateBackend
        from statekit.checkpoint.assignment import assign
        from statekit.serializers import Int64Serializer
        from statekit.spi import OperatorBackendParams, SubtaskInfo
        operator = coordinator.store.latest().metadata.operator(OPERATOR)
        found = []
        for index in range(2):
            backend = HeapStateBackend().create_operator_backend(OperatorBackendParams(
                SubtaskInfo(JOB, OPERATOR, index, 2, MAX_PARALLELISM), tuple(assign(operator, index, 2).operator),
                coordinator.store.access.restore_streams()))
            found.append(sorted(backend.get_union_list_state("epochs", Int64Serializer()).get()))
        return found

    epochs = [make_rows(300, 60, seed) for seed in (20, 21, 22)]
    parked, restored = _Coordinator(tmp_path / "a", "heap", 2), _Coordinator(tmp_path / "b", "heap", 2)
    for epoch, rows in enumerate(epochs, start=1):
        recovery = parked.run(epoch, rows)
        assert recovery == ("fresh" if epoch == 1 else "parked")
        kept = dict(local_recovery._PARKED)
        local_recovery._PARKED.clear()  # the second job always restores from storage
        restored.run(epoch, rows)
        for backend in local_recovery._PARKED.values():
            backend.keyed.dispose()
        local_recovery._PARKED.clear()
        local_recovery._PARKED.update(kept)
    assert operator_states(parked) == operator_states(restored)
    assert parked.state() == restored.state() == _want(*epochs)


def test_the_default_local_dir_is_the_users_own(tmp_path, monkeypatch):
    """Without spark.statekit.local.dir, working state goes to <tmp>/statekit-<uid>, mode 0700; a
    directory there that another user could have made, or may write into, is refused."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    coordinator = _Coordinator(tmp_path, "rocksdb", local=False)
    assert coordinator.run(1, make_rows(200, 40, 30)) == "fresh"
    assert coordinator.run(2, make_rows(200, 40, 31)) == "local"
    root = tmp_path / f"statekit-{os.getuid()}"
    info = root.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    assert (root / JOB / OPERATOR / f"rocksdb-subtask-0-of-1-max-{MAX_PARALLELISM}" / "reflects.json").is_file()

    root.chmod(0o777)  # e.g. created by someone else for everybody
    with pytest.raises(StatekitError, match=r"open to other users \(mode 777\).*spark\.statekit\.local\.dir"):
        coordinator.run(3, make_rows(200, 40, 32))
    root.chmod(0o700)
    monkeypatch.setattr(os, "getuid", lambda: info.st_uid + 1)  # as seen by another user
    with pytest.raises(StatekitError, match=rf"belongs to user id {info.st_uid}, not to this user"):
        default_local_dir()


def _slots(operator_dir) -> list[str]:
    return sorted(p.name for p in operator_dir.iterdir())


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_rescale_removes_the_old_parallelisms_slots_once_the_new_one_completed(tmp_path, backend):
    epochs = [make_rows(300, 60, seed) for seed in (33, 34, 35, 36)]
    before = _Coordinator(tmp_path, backend, parallelism=2)
    before.run(1, epochs[0])
    before.run(2, epochs[1])
    operator_dir = tmp_path / "local" / JOB / OPERATOR
    old = [f"{backend}-subtask-{i}-of-2-max-{MAX_PARALLELISM}" for i in range(2)]
    new = [f"{backend}-subtask-{i}-of-3-max-{MAX_PARALLELISM}" for i in range(3)]
    after = _Coordinator(tmp_path, backend, parallelism=3)
    assert after.run(3, epochs[2]) == "storage"
    assert _slots(operator_dir) == sorted(old + new), "until an epoch at the new parallelism completed, the old " \
                                                      "slots may still be the restore point's (a rescale undone)"
    held = acquire_lock(str(operator_dir / old[1]), "another process's hold on an old slot")
    try:
        assert after.run(4, epochs[3]) == SAME_WORKER[backend]
        assert _slots(operator_dir) == sorted([old[1]] + new), "a slot another process holds is never removed"
    finally:
        release_lock(held)
    assert after.run(5, []) == SAME_WORKER[backend]
    assert _slots(operator_dir) == sorted(new)
    assert after.state() == _want(*epochs)


def _age(path, seconds: float) -> None:
    """Make ``path`` and everything in it look untouched for ``seconds``."""
    then = time.time() - seconds
    os.utime(path, (then, then))
    for directory, names, files in os.walk(path):
        for name in files:
            os.utime(os.path.join(directory, name), (then, then))
        os.utime(directory, (then, then))


def test_working_state_unused_for_the_retention_is_removed(tmp_path):
    """A finished job's slots stay for spark.statekit.local.retention (default 7 days) after their
    last use, so that its next run reuses them; then a lease of any job on the machine removes them
    (at most once an hour per local root), but never a slot a process holds."""
    finished = _Coordinator(tmp_path, "rocksdb", parallelism=2, job="finished")
    finished.run(1, make_rows(300, 60, 37))
    local = tmp_path / "local"
    _age(local / "finished", 6 * 86400)
    running = _Coordinator(tmp_path, "rocksdb")
    running.run(1, make_rows(300, 60, 38))
    assert _slots(local / "finished" / OPERATOR) == [f"rocksdb-subtask-{i}-of-2-max-{MAX_PARALLELISM}"
                                                     for i in range(2)]

    _age(local / "finished", 8 * 86400)
    assert running.run(2, make_rows(300, 60, 39)) == "local"
    assert len(_slots(local / "finished" / OPERATOR)) == 2, "the root was swept less than an hour ago"

    held = acquire_lock(str(local / "finished" / OPERATOR / f"rocksdb-subtask-1-of-2-max-{MAX_PARALLELISM}"), "a hold")
    try:
        _age(local / local_recovery.SWEEP_MARKER, 2 * local_recovery.SWEEP_INTERVAL_SECONDS)
        assert running.run(3, make_rows(300, 60, 40)) == "local", "the running job's own slot is kept"
        assert _slots(local / "finished" / OPERATOR) == [f"rocksdb-subtask-1-of-2-max-{MAX_PARALLELISM}"], \
            "a slot a process holds is never removed"
    finally:
        release_lock(held)
    _age(local / "finished", 8 * 86400)
    assert local_recovery.sweep_unused(str(local), local_recovery.DEFAULT_RETENTION_SECONDS) == [], "an hour not passed"
    assert local_recovery.sweep_unused(str(local), local_recovery.DEFAULT_RETENTION_SECONDS,
                                       now=time.time() + local_recovery.SWEEP_INTERVAL_SECONDS) == [
        str(local / "finished" / OPERATOR / f"rocksdb-subtask-1-of-2-max-{MAX_PARALLELISM}")]
    assert not (local / "finished").exists(), "the job's emptied directories are removed too"
    assert _slots(local / JOB / OPERATOR) == [f"rocksdb-subtask-0-of-1-max-{MAX_PARALLELISM}"]
    assert finished.run(2, make_rows(300, 60, 41)) == "storage"  # the job runs again: no harm, a restore
