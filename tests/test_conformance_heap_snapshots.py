"""The heap backend against the snapshot/restore, rescale, TTL (processing and event time) and timers levels, with both storages."""
import pytest

from statekit.backends.heap import HeapStateBackend, snapshot_columns
from statekit.conformance_tests.incremental import IncrementalSnapshotTests
from statekit.conformance_tests.migration import MigrationTests
from statekit.conformance_tests.rescale import RescaleTests
from statekit.conformance_tests.snapshots import OnFilesystemStorage, SavepointConversionTests, SnapshotRestoreTests
from statekit.conformance_tests.timers import TimerTests
from statekit.conformance_tests.ttl import EventTimeTtlTests, TtlTests


class TestHeapSnapshots(SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests, TtlTests,
                        SavepointConversionTests, TimerTests, MigrationTests):
    @pytest.fixture
    def state_backend(self):
        return HeapStateBackend()


class TestHeapSnapshotsOnFilesystem(OnFilesystemStorage, TestHeapSnapshots):
    pass


class TestHeapEventTimeTtl(EventTimeTtlTests):
    state_backend = TestHeapSnapshots.state_backend


class TestHeapEventTimeTtlOnFilesystem(OnFilesystemStorage, TestHeapEventTimeTtl):
    pass


class TestHeapSnapshotsInShortRuns(TestHeapSnapshots):
    """Key groups serialized in runs of one or two (``snapshot_columns.KEYS_PER_RUN``), where
    the default puts a small test's key groups in one run: the columns are cut at run, key-group
    and namespace boundaries alike."""

    @pytest.fixture(autouse=True)
    def short_runs(self, monkeypatch):
        monkeypatch.setattr(snapshot_columns, "KEYS_PER_RUN", 2)
