"""The sqlite backend against statekit's conformance suite, subclassed fsspec-style: the mixins
bring the tests, ``state_backend`` builds the backend under test. The semantics, snapshot and
rescale levels run with snapshots kept inline (the ``jobmanager`` storage) and written as files
(the ``filesystem`` storage); the Spark level selects the backend by ``spark.statekit.*`` conf in
a real local SparkSession."""
import pytest

from statekit.conformance_tests.incremental import IncrementalSnapshotTests
from statekit.conformance_tests.migration import MigrationTests
from statekit.conformance_tests.rescale import RescaleTests
from statekit.conformance_tests.semantics import StateSemantics
from statekit.conformance_tests.snapshots import OnFilesystemStorage, SavepointConversionTests, SnapshotRestoreTests
from statekit.conformance_tests.spark import SparkTests
from statekit.conformance_tests.timers import TimerTests
from statekit.conformance_tests.ttl import TtlTests
from statekit_sqlite import SQLiteStateBackend


class TestSQLite(StateSemantics, SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests, TtlTests,
                 SavepointConversionTests, TimerTests, MigrationTests):
    @pytest.fixture
    def state_backend(self, tmp_path):
        # options as Spark conf passes them: strings, named as after spark.statekit.backend.sqlite.
        return SQLiteStateBackend(**{"local-dir": str(tmp_path / "sqlite"), "cache-size": "4m"})


class TestSQLiteOnFilesystem(OnFilesystemStorage, SnapshotRestoreTests, IncrementalSnapshotTests, RescaleTests):
    state_backend = TestSQLite.state_backend


class TestSQLiteOnSpark(SparkTests):
    @pytest.fixture
    def backend_settings(self):
        return {"backend": "sqlite", "backend.sqlite.cache-size": "4m"}
