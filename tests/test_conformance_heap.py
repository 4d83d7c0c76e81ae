"""The heap backend against the conformance suite's state-semantics level."""
from __future__ import annotations

import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.conformance_tests.semantics import StateSemantics
from statekit.spi import StateBackend


class TestHeapSemantics(StateSemantics):
    """Every state-semantics test, on the default-configured heap backend."""

    @pytest.fixture
    def state_backend(self) -> StateBackend:
        return HeapStateBackend()
