"""A backend whose snapshot is not isolated from later writes: the synchronous part takes no
view, the asynchronous part snapshots whatever the state is when it runs."""
from __future__ import annotations

from typing import Callable

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import KeyedBackendParams, PendingSnapshot, SnapshotOptions, StateHandle
from statekit.spi.storage import CheckpointStreams


class _Deferred(PendingSnapshot):
    def __init__(self, take: Callable[[], PendingSnapshot]) -> None:
        self._take = take

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        return self._take().write(streams)


class LeakySnapshotKeyedBackend(HeapKeyedStateBackend):
    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        take = super().snapshot
        return _Deferred(lambda: take(checkpoint_id, options))


class LeakySnapshotBackend(HeapStateBackend):
    name = "broken-leaky-snapshot"

    def create_keyed_backend(self, params: KeyedBackendParams) -> LeakySnapshotKeyedBackend:
        return LeakySnapshotKeyedBackend(params, self.changelog)
