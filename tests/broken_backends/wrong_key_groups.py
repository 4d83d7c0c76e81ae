"""A backend that restores only the first snapshot handle it is given: right while the
parallelism stays the same, but after a rescale that merges key-group ranges a subtask restores
only part of its key groups."""
from __future__ import annotations

import dataclasses

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import KeyedBackendParams


class FirstHandleOnlyBackend(HeapStateBackend):
    name = "broken-first-handle-only"

    def create_keyed_backend(self, params: KeyedBackendParams) -> HeapKeyedStateBackend:
        return super().create_keyed_backend(dataclasses.replace(params, restore_handles=params.restore_handles[:1]))
