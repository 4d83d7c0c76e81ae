"""A backend that drops what its serializers reject without a word: a value that does not
serialize is not written, and neither is any state of a key that does not serialize (the failure a
``try: ... except SerializationError: pass`` in a plugin makes). No error says why."""
from __future__ import annotations

import functools
from typing import Any

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import KeyedBackendParams, SerializationError, StateDescriptor

WRITES = ("update", "add", "add_all", "put", "put_all")


@functools.cache
def _swallowing(state_class: type) -> type:
    """``state_class`` whose writes do nothing under a key that does not serialize, and ignore a
    SerializationError of the value."""
    def swallowing(write: Any) -> Any:
        def write_or_drop(self: Any, *args: Any) -> Any:
            if self._backend.unserializable_key:
                return None
            try:
                return write(self, *args)
            except SerializationError:
                return None
        return write_or_drop

    writes = {name: swallowing(getattr(state_class, name)) for name in WRITES if hasattr(state_class, name)}
    return type(f"Swallowing{state_class.__name__}", (state_class,), writes)


class SwallowingKeyedBackend(HeapKeyedStateBackend):
    unserializable_key = False

    def set_current_key(self, key: Any, key_group: int) -> None:
        try:  # serialized eagerly, as a byte store does, and the error dropped
            self.key_serializer.serialize(key)
            self.unserializable_key = False
        except SerializationError:
            self.unserializable_key = True
        super().set_current_key(key, key_group)

    def _create_state(self, descriptor: StateDescriptor, table: Any) -> Any:
        state = super()._create_state(descriptor, table)
        state.__class__ = _swallowing(type(state))
        return state


class SwallowedSerializationBackend(HeapStateBackend):
    name = "broken-swallowed-serialization"

    def create_keyed_backend(self, params: KeyedBackendParams) -> SwallowingKeyedBackend:
        return SwallowingKeyedBackend(params, self.changelog)
