"""Savepoints are backend-independent: heap -> RocksDB -> heap, rescaling on the way, every key
compared with the oracle."""
import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import (
    WorkloadFunction, dump_state, expected_key_state, make_rows, oracle,
)
from statekit.runtime import LocalRunner
from statekit.storage.filesystem import FileSystemCheckpointStorage
from statekit.storage.pointers import resolve


def _runner(backend, parallelism, job_id, tmp_path, incremental=False):
    return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=parallelism, max_parallelism=128,
                       state_backend=backend, job_id=job_id, incremental=incremental, local_dir=str(tmp_path / "local"),
                       storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints")))


@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_heap_to_rocksdb_and_back_through_savepoints(tmp_path, incremental):
    rows = [make_rows(1500, 400, seed) for seed in range(3)]
    heap = _runner(HeapStateBackend(), 4, "heap-job", tmp_path)
    heap.run_epoch(rows[0])
    taken = heap.savepoint(str(tmp_path / "savepoints"))
    first = resolve(str(tmp_path / "savepoints" / f"savepoint-heap-job-{taken.checkpoint_id}"))

    rocks = _runner(RocksDBStateBackend(), 3, "rocks-job", tmp_path, incremental=incremental)
    rocks.restore_from(CheckpointMetadata.from_bytes(first.metadata), first.streams)
    rocks.run_epoch(rows[1])
    want = {k: expected_key_state(v) for k, v in oracle(rows[0] + rows[1]).items()}
    assert dump_state(rocks.latest_metadata(), rocks.streams, str(tmp_path / "d1"),
                      state_backend=RocksDBStateBackend()) == want
    taken = rocks.savepoint(str(tmp_path / "savepoints"))
    assert taken.checkpoint_id == 2, "checkpoint ids continue after the restored savepoint's"
    second = resolve(str(tmp_path / "savepoints" / f"savepoint-rocks-job-{taken.checkpoint_id}"))

    back = _runner(HeapStateBackend(), 5, "heap-again", tmp_path)
    back.restore_from(CheckpointMetadata.from_bytes(second.metadata), second.streams)
    back.run_epoch(rows[2])
    want = {k: expected_key_state(v) for k, v in oracle(rows[0] + rows[1] + rows[2]).items()}
    assert dump_state(back.latest_metadata(), back.streams, str(tmp_path / "d2")) == want
