"""The heap backend against the conformance suite's state-semantics level, and its Spark level
with both storages."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.conformance_tests.base import open_keyed_backend, set_key
from statekit.conformance_tests.semantics import StateSemantics, TtlSemantics
from statekit.conformance_tests.spark import SparkTests
from statekit.spi import Capabilities, StateBackend, ValueStateDescriptor


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


@pytest.mark.xfail(strict=True, reason="the heap holds namespaces as dict keys, so namespaces equal in Python but "
                                       "serialized apart (1 and numpy.int64(1), 1 and 1.0) are one namespace on the "
                                       "heap and two on RocksDB and LMDB (and in the canonical snapshot that a "
                                       "backend switch restores); holding them by their bytes as map user keys are "
                                       "held (heap/copies.py) needs the timers, snapshots and restore to follow")
def test_namespaces_equal_in_python_but_serialized_apart_are_two(tmp_path: Any) -> None:
    backend = open_keyed_backend(HeapStateBackend(), str(tmp_path))
    state = backend.get_state(ValueStateDescriptor("v"))
    set_key(backend, "k")
    state.set_current_namespace(1)
    state.update("python int")
    state.set_current_namespace(np.int64(1))
    assert state.value() is None, f"namespace numpy.int64(1) reads {state.value()!r}, the value of namespace 1"
