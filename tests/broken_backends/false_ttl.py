"""A backend that declares the ``ttl`` capability and ignores every descriptor's TTL: its entries
never expire (the claim a plugin author can make by flipping one flag)."""
from __future__ import annotations

import dataclasses

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import Capabilities, KeyedBackendParams, State, StateDescriptor, TypeSerializer


class IgnoresTtlKeyedBackend(HeapKeyedStateBackend):
    def get_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None = None) -> State:
        return self._registered_state(dataclasses.replace(descriptor, ttl=None), namespace_serializer)


class FalseTtlBackend(HeapStateBackend):
    name = "false-ttl"
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=True)

    def create_keyed_backend(self, params: KeyedBackendParams) -> IgnoresTtlKeyedBackend:
        return IgnoresTtlKeyedBackend(params, self.changelog)


class HidingCapabilities(Capabilities):
    """Capabilities whose ``declared()`` leaves TTL out, while the field (what statekit's runtime
    reads) says TTL is supported."""

    def declared(self) -> dict[str, bool]:
        return {**super().declared(), "ttl": False}


class HiddenTtlBackend(FalseTtlBackend):
    """TTL on for the runtime, reported off to the suite: its TTL tests would all skip."""
    name = "hidden-ttl"
    capabilities = HidingCapabilities(incremental_snapshots=True, async_snapshots=True, ttl=True)


class SilentTtlBackend(HeapStateBackend):
    """Declares no ``ttl`` and still accepts TTL descriptors (keeping their entries forever): a job
    that asked for TTL gets none, without the CapabilityError that says so."""
    name = "silent-ttl"
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=False)

    def create_keyed_backend(self, params: KeyedBackendParams) -> IgnoresTtlKeyedBackend:
        return IgnoresTtlKeyedBackend(params, self.changelog)
