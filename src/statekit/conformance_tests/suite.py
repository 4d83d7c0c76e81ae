"""Every level of the conformance suite against the backend and storage of the command line
(``python -m statekit.conformance_tests --backend NAME`` or ``pytest --statekit-backend NAME``).

statekit's pytest plugin collects this module for such a run; the fixtures below build the
backend and storage from the ``statekit_target`` fixture. To choose fixtures yourself, subclass
the mixins in a test module of your own instead (docs/plugin-authors.md).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from statekit.conformance_tests.incremental import IncrementalSnapshotTests
from statekit.conformance_tests.migration import MigrationTests
from statekit.conformance_tests.rescale import RescaleTests
from statekit.conformance_tests.semantics import StateSemantics
from statekit.conformance_tests.snapshots import LocalRecoveryTests, SavepointConversionTests, SnapshotRestoreTests
from statekit.conformance_tests.spark import SparkTests
from statekit.conformance_tests.storage import StorageTests
from statekit.conformance_tests.target import SuiteTarget
from statekit.conformance_tests.timers import TimerTests
from statekit.conformance_tests.ttl import EventTimeTtlTests, TtlTests
from statekit.spi.backend import StateBackend
from statekit.spi.storage import CheckpointStorage, CheckpointStreams


class Configured:
    """Fixtures of the mixins, built from the command line's backend and storage."""

    @pytest.fixture
    def state_backend(self, statekit_target: SuiteTarget) -> StateBackend:
        return statekit_target.create_backend()

    @pytest.fixture
    def checkpoint_storage(self, statekit_target: SuiteTarget, tmp_path: Path) -> CheckpointStorage:
        """The storage at a fresh location of this test's own (its test support places it)."""
        return statekit_target.create_storage(tmp_path / "storage")

    @pytest.fixture
    def snapshot_streams(self, checkpoint_storage: CheckpointStorage) -> CheckpointStreams:
        return checkpoint_storage.create_access("conformance-job").streams(1, "op-0")

    @pytest.fixture
    def backend_settings(self, statekit_target: SuiteTarget) -> dict[str, str]:
        return statekit_target.backend_settings()

    @pytest.fixture
    def checkpoint_settings(self, statekit_target: SuiteTarget, tmp_path: Path) -> dict[str, str]:
        return statekit_target.checkpoint_settings(tmp_path / "storage")


class TestSemantics(Configured, StateSemantics):
    pass


class TestSnapshots(Configured, SnapshotRestoreTests, IncrementalSnapshotTests, LocalRecoveryTests, RescaleTests,
                    SavepointConversionTests):
    pass


class TestMigration(Configured, MigrationTests):
    pass


class TestTtl(Configured, TtlTests):
    pass


class TestEventTimeTtl(Configured, EventTimeTtlTests):
    pass


class TestTimers(Configured, TimerTests):
    pass


class TestStorage(Configured, StorageTests):
    @pytest.fixture
    def unwritable_checkpoint_storage(self, statekit_target: SuiteTarget, tmp_path: Path
                                      ) -> tuple[Callable[[], CheckpointStorage], str]:
        """The storage at its support's unwritable location, built from settings as a job does."""
        from statekit.spark.conf import StatekitConf

        found = statekit_target.support().unwritable_location(tmp_path)
        if found is None:
            pytest.skip(f"{statekit_target.storage} has no location to get wrong")
        location, setting = found
        return lambda: StatekitConf.parse(statekit_target.location_settings(location)).create_storage(), setting


class TestSpark(Configured, SparkTests):
    pass
