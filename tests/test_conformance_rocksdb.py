"""The RocksDB backend against the semantics, snapshot/restore, rescale and Spark levels, with snapshots
kept inline (the jobmanager storage) and written as files (the filesystem storage)."""
import pytest

from statekit.backends.rocksdb import RocksDBStateBackend
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


class TestRocksDB(StateSemantics, SnapshotRestoreTests, IncrementalSnapshotTests, LocalRecoveryTests, RescaleTests,
                  TtlTests, SavepointConversionTests, TimerTests, MigrationTests):
    @pytest.fixture
    def state_backend(self, tmp_path):
        return RocksDBStateBackend(**{"local-dir": str(tmp_path / "rocksdb"), "block-cache-size": "16m",
                                      "write-buffer-size": "4m"})


class TestRocksDBOnFilesystem(OnFilesystemStorage, SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests,
                              TtlTests, TimerTests):
    state_backend = TestRocksDB.state_backend


class TestRocksDBEventTimeTtl(EventTimeTtlTests):
    state_backend = TestRocksDB.state_backend


class TestRocksDBEventTimeTtlOnFilesystem(OnFilesystemStorage, EventTimeTtlTests):
    state_backend = TestRocksDB.state_backend


class TestRocksDBSpark(SparkTests):
    @pytest.fixture
    def backend_settings(self):
        return {"backend": "rocksdb", "backend.rocksdb.block-cache-size": "16m",
                "backend.rocksdb.write-buffer-size": "4m"}


class TestRocksDBSparkOnJobManager(TestRocksDBSpark):
    """The Spark level with checkpoints in the driver's memory (the test state is small)."""

    @pytest.fixture
    def checkpoint_settings(self):
        return {"checkpoint.storage": "jobmanager"}
