"""The LMDB backend against the semantics, snapshot/restore, rescale and Spark levels, with snapshots
kept inline (the jobmanager storage) and written as files (the filesystem storage)."""
import pytest

from statekit.backends.lmdb import LMDBStateBackend
from statekit.conformance_tests.incremental import IncrementalSnapshotTests
from statekit.conformance_tests.migration import MigrationTests
from statekit.conformance_tests.rescale import RescaleTests
from statekit.conformance_tests.semantics import StateSemantics
from statekit.conformance_tests.snapshots import (
    LocalRecoveryTests, OnFilesystemStorage, SavepointConversionTests, SnapshotRestoreTests,
)
from statekit.conformance_tests.spark import SparkTests
from statekit.conformance_tests.timers import TimerTests
from statekit.conformance_tests.ttl import EventTimeTtlTests, TtlTests


class TestLMDB(StateSemantics, SnapshotRestoreTests, IncrementalSnapshotTests, LocalRecoveryTests, RescaleTests,
               TtlTests, SavepointConversionTests, TimerTests, MigrationTests):
    @pytest.fixture
    def state_backend(self, tmp_path):
        return LMDBStateBackend(**{"local-dir": str(tmp_path / "lmdb"), "map-size": "64k"})


class TestLMDBOnFilesystem(OnFilesystemStorage, SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests):
    state_backend = TestLMDB.state_backend


class TestLMDBEventTimeTtl(EventTimeTtlTests):
    state_backend = TestLMDB.state_backend


class TestLMDBSpark(SparkTests):
    @pytest.fixture
    def backend_settings(self):
        return {"backend": "lmdb", "backend.lmdb.map-size": "64k"}


class TestLMDBSparkOnJobManager(TestLMDBSpark):
    """The Spark level with checkpoints in the driver's memory (the test state is small)."""

    @pytest.fixture
    def checkpoint_settings(self):
        return {"checkpoint.storage": "jobmanager"}
