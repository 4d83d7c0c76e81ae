"""A backend written before state migration existed: it restores a state whose value serializer
changed as it was written, so the new serializer reads bytes of the old schema (the mistake the
migration level is there to catch)."""
from __future__ import annotations

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.backends.common.migration import Migration
from statekit.spi import KeyedBackendParams, TypeSerializer


class UnmigratedKeyedBackend(HeapKeyedStateBackend):
    def _migrate(self, registration, previous: TypeSerializer, migration: Migration) -> None:
        self._tables[registration.name].registration = registration  # the values stay as they were


class NoMigrationBackend(HeapStateBackend):
    name = "no-migration"

    def create_keyed_backend(self, params: KeyedBackendParams) -> UnmigratedKeyedBackend:
        return UnmigratedKeyedBackend(params, self.changelog)
