"""Tools for testing keyed functions: ``KeyedHarness`` steps a function through elements,
watermarks, processing times, snapshots and restores, as Flink's operator test harness does."""
from statekit.testing.harness import HarnessSnapshot, KeyedHarness

__all__ = ["HarnessSnapshot", "KeyedHarness"]
