"""The change feed: what changed in a job's keyed state between two of its checkpoints.

Where both checkpoints hold changelog chains (heap and LMDB incremental checkpoints) and the later
extends the earlier, only the key groups its newer deltas wrote are read; otherwise, and when a
state read has TTL (its entries expire in key groups no delta wrote), every key group is. The two
snapshots are compared key group by key group on their canonical rows (bytes): a cell present
after but not before, or with other bytes, is a ``put`` with its new value; a cell present
before but not after is a ``delete`` with its old value. A cell is a state's value, a map entry
(by map key), a timer (by timestamp), or a list element by its position in the list: appending
to a list puts its new positions, and shortening it deletes the positions past its new end. The
checkpoints may have different parallelisms (a rescale between them); their max parallelism is
the same for the life of a job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa

from statekit.backends.common.changelog import ChangelogStateHandle
from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import OperatorState
from statekit.reading.cells import CellDecoder, StateCell
from statekit.reading.snapshot_reader import SnapshotReader
from statekit.spi.errors import ConfigurationError
from statekit.spi.key_groups import KeyGroupRange

PUT = "put"
DELETE = "delete"

#: (state, key, namespace, user key, position among equal identities): a cell's identity
_Identity = tuple[str, bytes, bytes, "bytes | None", int]
#: where a cell's row is: its decoder, batch and row number, and its value bytes
_Row = tuple[CellDecoder, pa.RecordBatch, int, bytes]


@dataclass(frozen=True)
class StateChange:
    change: str  # PUT or DELETE
    cell: StateCell


def check_same_job(before: OperatorState, after: OperatorState) -> None:
    if before.max_parallelism != after.max_parallelism:
        raise ConfigurationError(f"the checkpoints have different max parallelisms ({before.max_parallelism} and "
                                 f"{after.max_parallelism}): they are not checkpoints of one job's operator")


def changes(before: SnapshotReader, after: SnapshotReader, before_operator: OperatorState,
            after_operator: OperatorState, index: int, parallelism: int,
            states: Sequence[str] | None = None) -> Iterator[StateChange]:
    """The changes in the key groups of subtask ``index`` of ``parallelism``, key group by key
    group: first the puts, then the deletes of each."""
    check_same_job(before_operator, after_operator)
    changed = None if _expires(before_operator, states) else \
        changed_key_groups(before_operator, after_operator, index, parallelism)
    if changed is None:  # no changelog says which key groups changed: compare them all
        parts = [(index, parallelism)]
    else:  # only the key groups the later deltas wrote, one at a time
        parts = [(key_group, before_operator.max_parallelism) for key_group in sorted(changed)]
    for part in parts:
        yield from _changes_in(before, after, before_operator, after_operator, *part, states)


def _expires(operator: OperatorState, states: Sequence[str] | None) -> bool:
    """Whether any of ``states`` (all when None) has TTL: its entries expire between two checkpoints
    in key groups no delta wrote (the reader leaves out what expired at each checkpoint's time)."""
    return any(meta.ttl_seconds is not None for name, meta in operator.states().items()
               if states is None or name in states)


def changed_key_groups(before: OperatorState, after: OperatorState, index: int, parallelism: int) -> set[int] | None:
    """The key groups of subtask ``index`` of ``parallelism`` that changed between the two
    checkpoints, when changelog chains say so: each chain of ``after`` extends a chain of
    ``before`` (same base, its deltas first), and only the deltas added since wrote anything.
    None when that cannot be told (other formats, a new base, a rescale in between)."""
    target = KeyGroupRange.of_subtask(after.max_parallelism, parallelism, index)
    earlier = [h for h in assign(before, index, parallelism).keyed if isinstance(h, ChangelogStateHandle)]
    changed: set[int] = set()
    for handle in assign(after, index, parallelism).keyed:
        if not isinstance(handle, ChangelogStateHandle):
            return None
        extended = next((e for e in earlier if e.base == handle.base and handle.deltas[:len(e.deltas)] == e.deltas),
                        None)
        if extended is None:
            return None
        for delta in handle.deltas[len(extended.deltas):]:
            changed.update(kg for kg in delta.key_groups if kg in target)
    return changed


def _changes_in(before: SnapshotReader, after: SnapshotReader, before_operator: OperatorState,
                after_operator: OperatorState, index: int, parallelism: int,
                states: Sequence[str] | None) -> Iterator[StateChange]:
    old = _rows_by_key_group(before, before_operator, index, parallelism, states)
    new = _rows_by_key_group(after, after_operator, index, parallelism, states)
    for key_group in sorted(old.keys() | new.keys()):
        was, now = old.get(key_group, {}), new.get(key_group, {})
        for identity, row in now.items():
            previous = was.get(identity)
            if previous is None or previous[3] != row[3]:
                yield StateChange(PUT, _decoded(key_group, row))
        for identity, row in was.items():
            if identity not in now:
                yield StateChange(DELETE, _decoded(key_group, row))


def _rows_by_key_group(reader: SnapshotReader, operator: OperatorState, index: int, parallelism: int,
                       states: Sequence[str] | None) -> dict[int, dict[_Identity, _Row]]:
    found: dict[int, dict[_Identity, _Row]] = {}
    seen: dict[int, dict[tuple, int]] = {}  # per key group: identity without position -> rows so far
    for decoder, key_group, batch in reader.batches(operator, index, parallelism, states):
        rows = found.setdefault(key_group, {})
        positions = seen.setdefault(key_group, {})
        columns = batch.to_pydict()
        for number, identity in enumerate(zip(columns["state"], columns["key"], columns["namespace"],
                                              columns["user_key"])):
            position = positions.get(identity, 0)  # list elements share (state, key, namespace)
            positions[identity] = position + 1
            rows[(*identity, position)] = (decoder, batch, number, columns["value"][number])
    return found


def _decoded(key_group: int, row: _Row) -> StateCell:
    decoder, batch, number, _ = row
    return next(decoder.cells(key_group, batch.slice(number, 1)))
