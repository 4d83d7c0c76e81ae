"""The heap backend against the snapshot/restore and rescale levels, with both storages."""
import fsspec
import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.conformance_tests.snapshots import RescaleTests, SnapshotRestoreTests
from statekit.storage.filesystem import FileSystemCheckpointStorage, FileSystemCheckpointStreams


class TestHeapSnapshots(SnapshotRestoreTests, RescaleTests):
    @pytest.fixture
    def state_backend(self):
        return HeapStateBackend()


class TestHeapSnapshotsOnFilesystem(SnapshotRestoreTests, RescaleTests):
    @pytest.fixture
    def state_backend(self):
        return HeapStateBackend()

    @pytest.fixture
    def snapshot_streams(self, tmp_path):
        return FileSystemCheckpointStreams(fsspec.filesystem("file"), str(tmp_path / "snapshots"), "chk-1",
                                           memory_threshold=1024)

    @pytest.fixture
    def checkpoint_storage(self, tmp_path):
        return FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=1024)
