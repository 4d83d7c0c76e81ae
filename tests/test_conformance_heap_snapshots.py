"""The heap backend against the snapshot/restore and rescale levels of the conformance suite."""
import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.conformance_tests.snapshots import RescaleTests, SnapshotRestoreTests


class TestHeapSnapshots(SnapshotRestoreTests, RescaleTests):
    @pytest.fixture
    def state_backend(self):
        return HeapStateBackend()
