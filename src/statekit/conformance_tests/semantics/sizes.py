"""``KeyedStateBackend.state_sizes``: what the epoch metrics report as each state's entries and bytes.

Optional: a backend whose ``state_sizes`` returns None (the SPI's default) does not say, and the
metrics give its states' sizes as unknown; these tests are then skipped. A backend that says must
count as the SPI defines (``StateSize``): exactly where it says its entries are exact, within a
factor of two where it says they are estimated (after removals: no more than before), with bytes
for every state that holds entries.
"""
from __future__ import annotations

import pytest

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import list_state, map_state, mixed_keys, value_state
from statekit.spi import (
    VOID_NAMESPACE, KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, StateSize, ValueStateDescriptor,
)
from statekit.spi.descriptors import TIMER_STATE_PREFIX

TIMERS = TIMER_STATE_PREFIX + "sizes/event"


def _sizes(backend: KeyedStateBackend) -> dict[str, StateSize]:
    sizes = backend.state_sizes()
    if sizes is None:
        pytest.skip(f"{type(backend).__name__}.state_sizes returns None: the backend does not report state sizes")
    return sizes


def _assert_entries(size: StateSize, expected: int, name: str) -> None:
    if size.entries_exact:
        assert size.entries == expected, f"state {name!r}: {size.entries} entries (exact), expected {expected}"
    else:
        assert expected / 2 <= size.entries <= expected * 2, \
            f"state {name!r}: {size.entries} entries (estimated), expected about {expected}"
    if expected:
        assert size.bytes > 0, f"state {name!r}: no bytes for {size.entries} entries"
    assert size.bytes_basis, f"state {name!r}: its bytes do not say how they were measured"


class StateSizeSemantics(BackendTestBase):
    """Entries: a cell per key and namespace of value and list state, an entry per map user key,
    a timer per timestamp and namespace of a timer state; bytes for each state with entries."""

    def test_state_sizes_count_cells_map_entries_and_timers(self, keyed_backend: KeyedStateBackend) -> None:
        value = value_state(keyed_backend, ValueStateDescriptor("v"))
        listed = list_state(keyed_backend, ListStateDescriptor("l"))
        mapped = map_state(keyed_backend, MapStateDescriptor("m"))
        map_state(keyed_backend, MapStateDescriptor("never-written"))
        timers = keyed_backend.create_timer_queue(TIMERS)
        keys = mixed_keys(600)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            value.update(i)
            value.set_current_namespace("window")
            value.update(-i)  # a second cell of the key
            value.set_current_namespace(VOID_NAMESPACE)
            listed.add_all(["x" * 20] * 3)  # one cell of three elements
            if i % 3 == 0:
                mapped.put_all({"a": i, "b": "y" * 50})
            timers.add(1_000 + i % 2)
            timers.add(1_000 + i % 2)  # the same timer again: still one
        sizes = _sizes(keyed_backend)
        expected = {"v": 1200, "l": 600, "m": 400, "never-written": 0, TIMERS: 600}
        for name, entries in expected.items():
            assert name in sizes, f"state_sizes() names {sorted(sizes)}, not the registered state {name!r}"
            _assert_entries(sizes[name], entries, name)
        assert sizes["v"].bytes_basis == sizes["m"].bytes_basis, "one backend measures its states' bytes alike"

    def test_state_sizes_follow_removals(self, keyed_backend: KeyedStateBackend) -> None:
        mapped = map_state(keyed_backend, MapStateDescriptor("m"))
        keys = mixed_keys(400)
        for key in keys:
            set_key(keyed_backend, key)
            mapped.put_all({1: "one", 2: "two"})
        before = _sizes(keyed_backend)["m"]
        _assert_entries(before, 800, "m")
        for key in keys[:300]:
            set_key(keyed_backend, key)
            mapped.clear()
        after = _sizes(keyed_backend)["m"]
        if after.entries_exact:
            _assert_entries(after, 200, "m")
        else:  # an estimate may not see range deletions until they are compacted away (RocksDB's)
            assert after.entries <= before.entries, f"{after.entries} entries (estimated) after removals, {before}"
