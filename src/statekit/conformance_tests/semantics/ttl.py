"""State semantics: TTL."""
from __future__ import annotations

import operator

import pytest

from statekit.conformance_tests.base import BackendTestBase
from statekit.conformance_tests.semantics.common import Average
from statekit.spi import (
    AggregatingStateDescriptor, CapabilityError, KeyedStateBackend, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, StateBackend, StateDescriptor, StateTtlConfig, TtlTimeCharacteristic,
    ValueStateDescriptor,
)

# --------------------------------------------------------------------------------------------
# TTL


def _ttl_descriptors(time: TtlTimeCharacteristic = TtlTimeCharacteristic.PROCESSING_TIME) -> list[StateDescriptor]:
    ttl = StateTtlConfig(ttl_seconds=60.0, time_characteristic=time)
    return [
        ValueStateDescriptor("ttl", ttl=ttl),
        ListStateDescriptor("ttl", ttl=ttl),
        MapStateDescriptor("ttl", ttl=ttl),
        ReducingStateDescriptor("ttl", reduce_function=operator.add, ttl=ttl),
        AggregatingStateDescriptor("ttl", aggregate_function=Average(), ttl=ttl),
    ]


class TtlSemantics(BackendTestBase):
    """TTL descriptors: rejected by backends that do not declare the ``ttl`` capability, event-time
    TTL descriptors by those that do not declare ``event_time_ttl``."""

    @pytest.mark.parametrize("descriptor", _ttl_descriptors(), ids=lambda d: d.kind.value)
    def test_ttl_without_capability_raises(self, state_backend: StateBackend,
                                           keyed_backend: KeyedStateBackend,
                                           descriptor: StateDescriptor) -> None:
        if state_backend.capabilities.ttl:
            pytest.skip(f"{type(state_backend).__name__} declares the 'ttl' capability; "
                        f"TTL expiry is tested by the TTL level, not here")
        with pytest.raises(CapabilityError):
            keyed_backend.get_state(descriptor)

    @pytest.mark.parametrize("descriptor", _ttl_descriptors(TtlTimeCharacteristic.EVENT_TIME),
                             ids=lambda d: d.kind.value)
    def test_event_time_ttl_without_capability_raises(self, state_backend: StateBackend,
                                                      keyed_backend: KeyedStateBackend,
                                                      descriptor: StateDescriptor) -> None:
        if state_backend.capabilities.event_time_ttl:
            pytest.skip(f"{type(state_backend).__name__} declares the 'event_time_ttl' capability; "
                        f"event-time TTL expiry is tested by the TTL level, not here")
        with pytest.raises(CapabilityError, match="TTL"):
            keyed_backend.get_state(descriptor)


# --------------------------------------------------------------------------------------------
