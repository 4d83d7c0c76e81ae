"""A backend that silently drops every write made after its first snapshot."""
from __future__ import annotations

import functools
from typing import Any

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import KeyedBackendParams, PendingSnapshot, SnapshotOptions, StateDescriptor

WRITES = ("update", "add", "add_all", "put", "put_all", "remove", "clear")


@functools.cache
def _dropping(state_class: type) -> type:
    """``state_class`` whose writes do nothing once the backend took a snapshot."""
    def dropping(write: Any) -> Any:
        def maybe_write(self: Any, *args: Any) -> Any:
            return None if self._backend.snapshot_taken else write(self, *args)
        return maybe_write

    writes = {name: dropping(getattr(state_class, name)) for name in WRITES if hasattr(state_class, name)}
    return type(f"Dropping{state_class.__name__}", (state_class,), writes)


class LostWritesKeyedBackend(HeapKeyedStateBackend):
    snapshot_taken = False

    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        self.snapshot_taken = True
        return super().snapshot(checkpoint_id, options)

    def _create_state(self, descriptor: StateDescriptor, table: Any) -> Any:
        state = super()._create_state(descriptor, table)
        state.__class__ = _dropping(type(state))
        return state


class LostWritesBackend(HeapStateBackend):
    name = "broken-lost-writes"

    def create_keyed_backend(self, params: KeyedBackendParams) -> LostWritesKeyedBackend:
        return LostWritesKeyedBackend(params, self.changelog)
