"""The RocksDB backend against the semantics, snapshot/restore and rescale levels, with snapshots
kept inline (the jobmanager storage) and written as files (the filesystem storage)."""
import fsspec
import pytest

from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.semantics import StateSemantics
from statekit.conformance_tests.snapshots import RescaleTests, SnapshotRestoreTests
from statekit.storage.filesystem import FileSystemCheckpointStorage, FileSystemCheckpointStreams


def _backend(tmp_path):
    return RocksDBStateBackend(**{"local-dir": str(tmp_path / "rocksdb"), "block-cache-size": "16m",
                                  "write-buffer-size": "4m"})


class TestRocksDB(StateSemantics, SnapshotRestoreTests, RescaleTests):
    @pytest.fixture
    def state_backend(self, tmp_path):
        return _backend(tmp_path)


class TestRocksDBOnFilesystem(SnapshotRestoreTests, RescaleTests):
    @pytest.fixture
    def state_backend(self, tmp_path):
        return _backend(tmp_path)

    @pytest.fixture
    def snapshot_streams(self, tmp_path):
        return FileSystemCheckpointStreams(fsspec.filesystem("file"), str(tmp_path / "snapshots"), "chk-1",
                                           memory_threshold=1024)

    @pytest.fixture
    def checkpoint_storage(self, tmp_path):
        return FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=1024)
