"""The heap backend against the conformance suite's state-semantics level, and its Spark level
with both storages."""
from __future__ import annotations

import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap import sizes as heap_sizes
from statekit.conformance_tests.base import set_key
from statekit.conformance_tests.semantics import StateSemantics, StateSizeSemantics, TtlSemantics
from statekit.conformance_tests.semantics.common import map_state, mixed_keys
from statekit.conformance_tests.spark import SparkTests
from statekit.conformance_tests.ttl import EventTimeTtlTests
from statekit.spi import Capabilities, MapStateDescriptor, StateBackend


class TestHeapSemantics(StateSemantics):
    """Every state-semantics test, on the default-configured heap backend."""

    @pytest.fixture
    def state_backend(self) -> StateBackend:
        return HeapStateBackend()


class TestHeapStateSizesBeyondExactCells(StateSizeSemantics):
    """The heap estimates the entries of map and timer state holding more cells than it counts."""

    @pytest.fixture(autouse=True)
    def few_exact_cells(self, monkeypatch) -> None:
        monkeypatch.setattr(heap_sizes, "EXACT_CELLS", 100)

    @pytest.fixture
    def state_backend(self) -> StateBackend:
        return HeapStateBackend()

    def test_beyond_them_entries_are_estimated_from_the_sample(self, keyed_backend) -> None:
        mapped = map_state(keyed_backend, MapStateDescriptor("m"))
        for key in mixed_keys(300):
            set_key(keyed_backend, key)
            mapped.put_all({1: "one", 2: "two", 3: "three"})
        size = keyed_backend.state_sizes()["m"]
        assert (size.entries, size.entries_exact) == (900, False), "300 cells of 3 entries, as the sample's"


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

