"""The RocksDB backend against the semantics, snapshot/restore and rescale levels, with snapshots
kept inline (the jobmanager storage) and written as files (the filesystem storage)."""
import pytest

from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.semantics import StateSemantics
from statekit.conformance_tests.snapshots import (
    IncrementalSnapshotTests, OnFilesystemStorage, RescaleTests, SnapshotRestoreTests,
)


class TestRocksDB(StateSemantics, SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests):
    @pytest.fixture
    def state_backend(self, tmp_path):
        return RocksDBStateBackend(**{"local-dir": str(tmp_path / "rocksdb"), "block-cache-size": "16m",
                                      "write-buffer-size": "4m"})


class TestRocksDBOnFilesystem(OnFilesystemStorage, SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests):
    state_backend = TestRocksDB.state_backend
