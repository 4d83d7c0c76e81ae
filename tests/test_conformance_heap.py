"""The heap backend against the conformance suite's state-semantics level, and its Spark level
with both storages."""
from __future__ import annotations

import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.conformance_tests.semantics import StateSemantics, TtlSemantics
from statekit.conformance_tests.spark import SparkTests
from statekit.conformance_tests.ttl import EventTimeTtlTests
from statekit.spi import Capabilities, StateBackend


class TestHeapSemantics(StateSemantics):
    """Every state-semantics test, on the default-configured heap backend."""

    @pytest.fixture
    def state_backend(self) -> StateBackend:
        return HeapStateBackend()


class HeapWithoutTtl(HeapStateBackend):
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=False)


class TestHeapWithoutTtlRefusesTtl(TtlSemantics):
    """A backend that does not declare ``ttl`` refuses TTL descriptors (the heap implements TTL, so
    only its declaration decides)."""

    @pytest.fixture
    def state_backend(self) -> StateBackend:
        return HeapWithoutTtl()


class HeapWithoutEventTimeTtl(HeapStateBackend):
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=True)


class TestHeapWithoutEventTimeTtl(TtlSemantics):
    """A backend that declares ``ttl`` but not ``event_time_ttl`` refuses event-time TTL descriptors
    (the heap implements it, so only its declaration decides)."""

    @pytest.fixture
    def state_backend(self) -> StateBackend:
        return HeapWithoutEventTimeTtl()


class TestHeapWithoutEventTimeTtlSkips(EventTimeTtlTests):
    """The event-time TTL tests skip, with the reason, for a backend that does not declare it."""

    state_backend = TestHeapWithoutEventTimeTtl.state_backend


class TestHeapSpark(SparkTests):
    """Checkpoints to the ``filesystem`` storage (the default of the Spark level)."""

    @pytest.fixture
    def backend_settings(self) -> dict[str, str]:
        return {"backend": "heap"}


class TestHeapSparkOnJobManager(TestHeapSpark):
    """Checkpoints held in the driver's memory (the ``jobmanager`` storage)."""

    @pytest.fixture
    def checkpoint_settings(self) -> dict[str, str]:
        return {"checkpoint.storage": "jobmanager"}

