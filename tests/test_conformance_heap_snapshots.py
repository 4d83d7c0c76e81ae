"""The heap backend against the snapshot/restore and rescale levels, with both storages."""
import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.conformance_tests.incremental import IncrementalSnapshotTests
from statekit.conformance_tests.rescale import RescaleTests
from statekit.conformance_tests.snapshots import OnFilesystemStorage, SavepointConversionTests, SnapshotRestoreTests
from statekit.conformance_tests.ttl import TtlTests


class TestHeapSnapshots(SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests, TtlTests,
                        SavepointConversionTests):
    @pytest.fixture
    def state_backend(self):
        return HeapStateBackend()


class TestHeapSnapshotsOnFilesystem(OnFilesystemStorage, TestHeapSnapshots):
    pass
