"""Converting a checkpoint to a savepoint cleans up after itself when a backend fails."""
from __future__ import annotations

import os

import pytest

from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.workload import WorkloadFunction, make_rows
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.savepoints import snapshot_as_savepoint
from statekit.spi import OperatorBackendParams
from statekit.storage.inline import InlineStreams


class OperatorBackendFails(RocksDBStateBackend):
    """RocksDB whose operator backend cannot be created; remembers the keyed backends it opened."""

    def __init__(self) -> None:
        super().__init__()
        self.keyed_dirs: list[str] = []

    def create_keyed_backend(self, params):
        backend = super().create_keyed_backend(params)
        self.keyed_dirs.append(backend.instance_dir)
        return backend

    def create_operator_backend(self, params: OperatorBackendParams):
        raise RuntimeError("injected: no operator backend")


def _files_under(directory: str) -> list[str]:
    return [os.path.join(root, name) for root, _, names in os.walk(directory) for name in names]


def test_keyed_backend_is_disposed_when_the_operator_backend_cannot_be_created(tmp_path):
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, state_backend=RocksDBStateBackend(),
                         local_dir=str(tmp_path / "job"))
    runner.run_epoch(make_rows(200, 50, seed=3))
    failing = OperatorBackendFails()
    local_dir = str(tmp_path / "savepoint-local")
    with pytest.raises(RuntimeError, match="injected"):
        snapshot_as_savepoint(runner.latest_metadata(), runner.streams, failing, lambda subtask: InlineStreams(),
                              local_dir=local_dir)
    assert len(failing.keyed_dirs) == 1, "the conversion went on after the first subtask failed"
    assert not os.path.exists(failing.keyed_dirs[0]), \
        f"the keyed backend was left open: its RocksDB directory (and LOCK) remain: {_files_under(local_dir)}"
    # the same subtask's state can be opened again at once (no lock left behind)
    savepoint = snapshot_as_savepoint(runner.latest_metadata(), runner.streams, RocksDBStateBackend(),
                                      lambda subtask: InlineStreams(), local_dir=local_dir)
    assert savepoint.is_savepoint and _files_under(local_dir) == []
