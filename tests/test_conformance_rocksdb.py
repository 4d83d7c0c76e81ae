"""The RocksDB backend against the semantics, snapshot/restore and rescale levels."""
import pytest

from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.semantics import StateSemantics
from statekit.conformance_tests.snapshots import RescaleTests, SnapshotRestoreTests


class TestRocksDB(StateSemantics, SnapshotRestoreTests, RescaleTests):
    @pytest.fixture
    def state_backend(self, tmp_path):
        return RocksDBStateBackend(**{"local-dir": str(tmp_path / "rocksdb"), "block-cache-size": "16m",
                                      "write-buffer-size": "4m"})
