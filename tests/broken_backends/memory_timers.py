"""A backend that keeps timers in a queue of its own, outside its state: they fire in the right
order while the backend lives, but no snapshot holds them (the shortcut a plugin author may take
when timers look like a runtime concern rather than state)."""
from __future__ import annotations

import heapq
from typing import Any

from statekit.backends.common.key_layout import varint
from statekit.backends.common.namespaces import encode_namespace
from statekit.backends.common.registration import RegisteredState
from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import KeyedBackendParams, VOID_NAMESPACE
from statekit.spi.timers import Timer, TimerQueue, check_timestamp


class InMemoryTimerQueue(TimerQueue):
    def __init__(self, backend: HeapKeyedStateBackend, registration: RegisteredState) -> None:
        self._backend = backend
        self._namespaces = registration.namespace_serializer
        self._heap: list[tuple[int, int, bytes, Any, Any]] = []
        self._live: set[tuple[int, Any, Any]] = set()

    def add(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        timestamp = check_timestamp(timestamp)
        key = self._backend.current_key
        if (timestamp, key, namespace) not in self._live:
            self._live.add((timestamp, key, namespace))
            key_bytes = self._backend.key_serializer.serialize(key)
            ns_bytes = encode_namespace(namespace, self._namespaces)
            order = varint(len(key_bytes)) + key_bytes + varint(len(ns_bytes)) + ns_bytes
            heapq.heappush(self._heap, (timestamp, self._backend.current_key_group, order, key, namespace))

    def remove(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        self._live.discard((check_timestamp(timestamp), self._backend.current_key, namespace))

    def poll(self, up_to: int) -> Timer | None:
        while self._heap and self._heap[0][0] <= up_to:
            timestamp, key_group, _, key, namespace = heapq.heappop(self._heap)
            if (timestamp, key, namespace) in self._live:
                self._live.discard((timestamp, key, namespace))
                return Timer(timestamp, key, key_group, namespace)
        return None

    def peek_timestamp(self) -> int | None:
        while self._heap and (self._heap[0][0], self._heap[0][3], self._heap[0][4]) not in self._live:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None


class MemoryTimersKeyedBackend(HeapKeyedStateBackend):
    def _create_timer_queue(self, registration: RegisteredState) -> InMemoryTimerQueue:
        return InMemoryTimerQueue(self, registration)


class MemoryTimersBackend(HeapStateBackend):
    name = "memory-timers"

    def create_keyed_backend(self, params: KeyedBackendParams) -> MemoryTimersKeyedBackend:
        return MemoryTimersKeyedBackend(params, self.changelog)
