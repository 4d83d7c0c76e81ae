"""The heap backend's state sizes (``KeyedStateBackend.state_sizes``): exact entries, bytes sampled.

Entries are counted from the key-group maps: one ``len`` per namespace of each key group for
value, list, reducing and aggregating state (exact). Map and timer state hold several entries (user
keys, timers) per cell: counted exactly up to ``EXACT_CELLS`` cells (a ``len`` per cell, about
0.25 µs each), estimated beyond from the sample's entries per cell. Bytes are what the canonical
format serializes (key, namespace, user key, value), measured on a sample of at most
``SAMPLE_CELLS`` cells (at most ``CELLS_PER_KEY_GROUP`` from each namespace of a key group, in
key-group order) and scaled to every cell: the size of the state in a snapshot, not its footprint
in memory (Python objects take several times more).
"""
from __future__ import annotations

from itertools import islice

from statekit.backends.heap.snapshot_columns import StateColumns
from statekit.backends.heap.state_table import KeyGroupMap, StateTable
from statekit.spi.backend import StateSize
from statekit.spi.descriptors import StateKind
from statekit.spi.key_format import KeyBytes

SAMPLE_CELLS = 64
#: map and timer state: entries counted cell by cell up to this many cells, estimated beyond
EXACT_CELLS = 20_000
CELLS_PER_KEY_GROUP = 4
#: ``StateSize.bytes_basis`` of the heap's sizes
BYTES_BASIS = "sampled"
_ENTRIES_PER_CELL = (StateKind.MAP, StateKind.TIMERS)


def state_size(table: StateTable, key_bytes: KeyBytes) -> StateSize:
    """The size of the state ``table`` holds now."""
    groups = table.groups[:table.size]
    cells = sum(len(held) for group in groups for held in group.values())
    if not cells:
        return StateSize(0, 0, True, BYTES_BASIS)
    sample = _sample(groups)
    sampled_cells = sum(map(len, sample.values()))
    entries, exact = cells, True
    if table.registration.kind in _ENTRIES_PER_CELL:
        exact = cells <= EXACT_CELLS
        entries = (sum(sum(map(len, held.values())) for group in groups for held in group.values()) if exact else
                   round(cells * _entries(sample) / sampled_cells))
    columns = StateColumns(table.registration, table.namespaces, table.user_keys, key_bytes)
    sampled_bytes = sum(len(rows.namespace) * len(rows.keys) + rows.keys.nbytes
                        + (rows.user_keys.nbytes if rows.user_keys is not None else 0)
                        + (rows.values.nbytes if not isinstance(rows.values, bytes) else 0)
                        for rows in columns.rows([sample])[0])
    return StateSize(entries, round(sampled_bytes * cells / sampled_cells), exact, BYTES_BASIS)


def _entries(sample: KeyGroupMap) -> int:
    return sum(sum(map(len, held.values())) for held in sample.values())


def _sample(groups: list[KeyGroupMap]) -> KeyGroupMap:
    """Up to ``SAMPLE_CELLS`` cells, as one key-group map (the keys of distinct key groups are distinct)."""
    sample: KeyGroupMap = {}
    taken = 0
    for group in groups:
        for namespace, cells in group.items():
            picked = dict(islice(cells.items(), min(CELLS_PER_KEY_GROUP, SAMPLE_CELLS - taken)))
            if picked:
                sample.setdefault(namespace, {}).update(picked)
                taken += len(picked)
            if taken >= SAMPLE_CELLS:
                return sample
    return sample
