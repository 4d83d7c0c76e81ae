"""The heap's cells as the canonical format's columns, for snapshot writers.

Each column is serialized in one call over a run of key groups (``serialize_arrow`` of every key,
then of every value) and cut into per-key-group, per-namespace slices, which cost nothing to make.
A serializer call has a fixed cost of tens of microseconds: called per key group and state, it was
most of a full snapshot of small key groups (128 key groups of 400 keys and two states: 512 calls,
half of the 50 ms). A run holds at most ``KEYS_PER_RUN`` keys (or one larger key group), because a
serializer reads each held object twice (its type check, then its conversion), and a longer run
no longer fits the CPU's cache between the two: in a snapshot of 3,900-key key groups, runs of two
key groups cost 8% and runs of 64k keys 1.5x the time of runs of one.
"""
from __future__ import annotations

from itertools import chain
from typing import Iterable, NamedTuple, Sequence

import numpy as np
import pyarrow as pa

from statekit.backends.common.canonical import CanonicalSnapshotWriter
from statekit.backends.common.key_layout import timestamp_bytes
from statekit.backends.common.registration import RegisteredState
from statekit.backends.heap.copies import Namespaces, UserKeys
from statekit.backends.heap.state_table import KeyGroupMap
from statekit.spi.descriptors import StateKind
from statekit.spi.errors import SerializationError
from statekit.spi.key_format import KeyBytes
from statekit.spi.state import VOID_NAMESPACE

#: a full snapshot serializes the key groups in runs of about this many keys of all states (at
#: least one key group per run): few serializer calls, and the held objects of a run in cache
KEYS_PER_RUN = 1 << 12
_ONE_VALUE_PER_KEY = (StateKind.VALUE, StateKind.REDUCING, StateKind.AGGREGATING)


class NamespaceRows(NamedTuple):
    """The rows of one state's namespace in one key group, as ``add_columns`` takes them."""

    namespace: bytes
    keys: pa.Array
    user_keys: pa.Array | None
    values: pa.Array | bytes

    def write(self, writer: CanonicalSnapshotWriter, key_group: int, state: str, op: int | None = None) -> None:
        writer.add_columns(key_group, state, self.keys, self.namespace, self.user_keys, self.values, op)


class StateColumns:
    """How one state's cells become rows: a key per row (repeated for each list element, map
    entry or timer of the key), the namespace, the user key (map key or timer timestamp) and the
    value."""

    def __init__(self, registration: RegisteredState, namespaces: Namespaces, user_keys: UserKeys | None,
                 key_bytes: KeyBytes) -> None:
        self._name = registration.name
        self._kind = registration.kind
        self._values = None if self._kind is StateKind.TIMERS else registration.value_serializer
        self._namespaces = namespaces
        self._user_keys = user_keys
        self._key_bytes = key_bytes

    def rows(self, groups: Sequence[KeyGroupMap]) -> list[list[NamespaceRows]]:
        """For each of ``groups`` (key-group maps of this state), its rows per namespace."""
        cells = [(position, self._namespaces.to_bytes(namespace), entries)
                 for position, group in enumerate(groups) for namespace, entries in group.items() if entries]
        rows: list[list[NamespaceRows]] = [[] for _ in groups]
        if not cells:
            return rows
        try:
            return self._rows(cells, rows)
        except SerializationError as exc:  # the cell is looked for only now, off the snapshot's path
            raise self._unserializable(groups, exc) from exc

    def _rows(self, cells: list[tuple[int, bytes, dict]], rows: list[list[NamespaceRows]]) -> list[list[NamespaceRows]]:
        held = [entries for _, _, entries in cells]
        keys = self._key_bytes.serialize_arrow(list(chain.from_iterable(held)))
        user_keys: pa.Array | None = None
        values: pa.Array | bytes
        if self._kind in _ONE_VALUE_PER_KEY:
            values = self._values.serialize_arrow(list(chain.from_iterable(e.values() for e in held)))  # type: ignore[union-attr]
            counts: Iterable[int] = map(len, held)
        else:
            containers = list(chain.from_iterable(e.values() for e in held))
            keys = keys.take(np.repeat(np.arange(len(keys)), list(map(len, containers))))
            counts = [sum(map(len, e.values())) for e in held]
            if self._kind is StateKind.LIST:
                values = self._values.serialize_arrow(list(chain.from_iterable(containers)))  # type: ignore[union-attr]
            elif self._kind is StateKind.MAP:
                user_key_bytes = self._user_keys.to_bytes  # type: ignore[union-attr]
                user_keys = pa.array(list(map(user_key_bytes, chain.from_iterable(containers))), pa.binary())
                values = self._values.serialize_arrow(  # type: ignore[union-attr]
                    list(chain.from_iterable(mapping.values() for mapping in containers)))
            else:  # timers: one row per timer, the timestamp as user key (the canonical format's)
                user_keys = pa.array([timestamp_bytes(t) for timers in containers for t in sorted(timers)], pa.binary())
                values = b""
        start = 0
        for (position, namespace, _), count in zip(cells, counts):
            rows[position].append(NamespaceRows(
                namespace, keys.slice(start, count), None if user_keys is None else user_keys.slice(start, count),
                values if isinstance(values, bytes) else values.slice(start, count)))
            start += count
        return rows


    def _unserializable(self, groups: Sequence[KeyGroupMap], exc: SerializationError) -> SerializationError:
        """``exc`` with the state, key and namespace of the first cell whose key or value does not serialize."""
        for group in groups:
            for namespace, entries in group.items():
                for key, held in entries.items():
                    where = f"key {key!r}" + (f", namespace {namespace!r}" if namespace is not VOID_NAMESPACE else "")
                    try:
                        self._key_bytes.serialize(key)
                    except SerializationError as failed:
                        return SerializationError(f"state {self._name!r}: {where} cannot be snapshotted: {failed}; "
                                                  f"key by values the key serializer takes")
                    if self._values is None:
                        continue
                    values = ((held,) if self._kind in _ONE_VALUE_PER_KEY else
                              held.values() if self._kind is StateKind.MAP else held)
                    for value in values:
                        try:
                            self._values.serialize(value)
                        except SerializationError as failed:
                            return SerializationError(
                                f"state {self._name!r}: the value of {where} cannot be snapshotted: {failed}; store "
                                f"values its serializer takes, or give the state's descriptor a serializer for them "
                                f"(PickleSerializer takes any picklable value)")
        return SerializationError(f"state {self._name!r} cannot be snapshotted: {exc}")


def key_group_runs(views: Sequence[Sequence[KeyGroupMap]], n_key_groups: int) -> list[range]:
    """Consecutive key-group indices in runs of at most ``KEYS_PER_RUN`` keys of all ``views`` (a
    state's key-group maps each), or of one key group that has more. Keys, not rows: a key of a
    list, map or timer state counts once however many elements it holds, so runs of such states
    may hold more rows (and objects)."""
    runs, start, keys = [], 0, 0
    for index in range(n_key_groups):
        count = sum(len(entries) for view in views for entries in view[index].values())
        if keys and keys + count > KEYS_PER_RUN:  # a run never grows past it, unless by one key group alone
            runs.append(range(start, index))
            start, keys = index, 0
        keys += count
    if start < n_key_groups:
        runs.append(range(start, n_key_groups))
    return runs
