"""The heap state backend: keyed state as Python objects, snapshots in the canonical format."""
from statekit.backends.heap.backend import HeapKeyedStateBackend, HeapStateBackend

__all__ = ["HeapKeyedStateBackend", "HeapStateBackend"]
