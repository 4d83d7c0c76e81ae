"""A backend that drops a value its serializer rejects without a word: the write is lost, no
error says why (the failure a ``try: ... except SerializationError: pass`` in a plugin makes)."""
from __future__ import annotations

import functools
from typing import Any

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import KeyedBackendParams, SerializationError, StateDescriptor

WRITES = ("update", "add", "add_all", "put", "put_all")


@functools.cache
def _swallowing(state_class: type) -> type:
    """``state_class`` whose writes ignore a SerializationError."""
    def swallowing(write: Any) -> Any:
        def write_or_drop(self: Any, *args: Any) -> Any:
            try:
                return write(self, *args)
            except SerializationError:
                return None
        return write_or_drop

    writes = {name: swallowing(getattr(state_class, name)) for name in WRITES if hasattr(state_class, name)}
    return type(f"Swallowing{state_class.__name__}", (state_class,), writes)


class SwallowingKeyedBackend(HeapKeyedStateBackend):
    def _create_state(self, descriptor: StateDescriptor, table: Any) -> Any:
        state = super()._create_state(descriptor, table)
        state.__class__ = _swallowing(type(state))
        return state


class SwallowedSerializationBackend(HeapStateBackend):
    name = "broken-swallowed-serialization"

    def create_keyed_backend(self, params: KeyedBackendParams) -> SwallowingKeyedBackend:
        return SwallowingKeyedBackend(params, self.changelog)
