"""Changelog-based incremental snapshots, for any backend (heap, LMDB, a plugin's).

A checkpoint's keyed state is a *chain*: a base (a full snapshot in the canonical format) and
deltas, each holding, per key group, the cells changed since the previous *completed*
checkpoint. A delta is a canonical-format file with an ``op`` per row: a changed cell is written
as ``DELETE`` of the whole cell followed by ``PUT`` rows of its current contents (none if it was
cleared), so applying deltas in order reproduces the state exactly. Base and deltas are written
in shared scope; later checkpoints reference them, and retention deletes them once unreferenced.

A new base is materialized when there is no usable chain (first checkpoint, rescaled restore,
no-claim restore) or when the chain passes ``max_chain_length`` deltas or its deltas' bytes pass
``max_chain_bytes_ratio`` times the base's bytes. Restoring a key-group range reads only those
key groups from the base and from every delta.

A backend uses a ``ChangelogTracker``: while ``enabled`` it calls ``dirty[index].add(cell)`` on
every write (cell is whatever identifies a (state, key, namespace) for the backend), and
``capture``/``chain``/``complete``/``abort`` around snapshots. Tracking starts with the first
incremental snapshot (which is a base anyway) or when a restored chain is adopted, so backends
whose snapshots are all full pay nothing for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator

from statekit.backends.common.canonical import KeyGroupsOf, read_key_groups
from statekit.spi.handles import (
    KeyedStateHandle, KeyGroupsStateHandle, StateMetaInfo, StreamStateHandle, nested_handle, read_key_group_range,
    register_handle,
)
from statekit.spi.json_fields import JsonObject, malformed
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.options import Option, integer, number
from statekit.spi.storage import CheckpointStreams

OP_PUT = 0
OP_DELETE = 1


@dataclass(frozen=True)
class ChangelogConfig:
    max_chain_length: int = 16
    max_chain_bytes_ratio: float = 1.0
    #: the backend options that set it (``OptionValues.build(ChangelogConfig, "changelog.")``)
    OPTIONS: ClassVar[tuple[Option, ...]] = (
        Option("changelog.max-chain-length", integer(minimum=1, maximum=1 << 20), 16,
               "incremental checkpoints: deltas on one base before a new base is written"),
        Option("changelog.max-chain-bytes-ratio", number(positive=True, maximum=1e6), 1.0,
               "... or once the deltas' bytes pass this many times the base's"))


@register_handle("changelog")
@dataclass(frozen=True)
class ChangelogStateHandle(KeyedStateHandle):
    """A base snapshot and the deltas on top of it, oldest first."""

    key_group_range: KeyGroupRange
    base: KeyGroupsStateHandle
    deltas: tuple[KeyGroupsStateHandle, ...] = ()

    @property
    def newest(self) -> KeyGroupsStateHandle:
        return self.deltas[-1] if self.deltas else self.base

    def key_serializer_snapshot(self) -> dict[str, Any]:
        return self.newest.key_serializer

    def state_meta_infos(self) -> tuple[StateMetaInfo, ...]:
        return self.newest.states

    @property
    def delta_bytes(self) -> int:
        return sum(d.stream.size for d in self.deltas)

    def extended(self, delta: KeyGroupsStateHandle | None) -> "ChangelogStateHandle":
        return self if delta is None else ChangelogStateHandle(self.key_group_range, self.base, (*self.deltas, delta))

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield self.base.stream
        for delta in self.deltas:
            yield delta.stream

    def _fields_json(self) -> dict[str, Any]:
        return {"key_group_range": self.key_group_range.to_json(), "base": self.base.to_json(),
                "deltas": [d.to_json() for d in self.deltas]}

    @classmethod
    def _from_fields(cls, data: JsonObject) -> "ChangelogStateHandle":
        data.expect_fields(("type", "key_group_range", "base", "deltas"))
        key_group_range = read_key_group_range(data)
        base = nested_handle(data, "base", KeyGroupsStateHandle)
        deltas_json = data.array("deltas")
        deltas = tuple(nested_handle(deltas_json, i, KeyGroupsStateHandle) for i in range(len(deltas_json)))
        for path, part in ((data.path_of("base"), base),
                           *((deltas_json.path_of(i), delta) for i, delta in enumerate(deltas))):
            if part.key_group_range != key_group_range:  # a chain is rebased whenever its range changes
                malformed(path, f"covers key groups {part.key_group_range}, not the chain's {key_group_range}",
                          show_value=False)
        return cls(key_group_range, base, deltas)


class ChangelogTracker:
    """Dirty cells per key group since the last completed checkpoint, and the confirmed chain."""

    def __init__(self, key_groups: KeyGroupRange, config: ChangelogConfig) -> None:
        self.key_groups = key_groups
        self.config = config
        #: cells written since the last snapshot, by key-group index (backends add to these)
        self.dirty: list[set[Any]] = [set() for _ in range(len(key_groups))]
        self.chain: ChangelogStateHandle | None = None  # what the last completed checkpoint holds
        self.enabled = False
        self._captured: dict[int, list[set[Any]]] = {}  # per pending checkpoint: its dirty cells
        #: per pending checkpoint: what it holds (None: a full checkpoint, no chain)
        self._written: dict[int, ChangelogStateHandle | None] = {}
        #: the newest checkpoint completed: it subsumes every older one (a late confirmation is ignored)
        self._last_completed = 0

    def needs_base(self) -> bool:
        """Whether the next incremental snapshot must write a new base: no chain, a chain too long,
        or a full checkpoint pending (once it completes, retention may delete the chain's files)."""
        chain = self.chain
        return (chain is None or None in self._written.values() or len(chain.deltas) >= self.config.max_chain_length
                or chain.delta_bytes > self.config.max_chain_bytes_ratio * chain.base.stream.size)

    def capture(self, checkpoint_id: int) -> list[set[Any]]:
        """Synchronous snapshot part: the cells changed since the last completed checkpoint
        (those of snapshots still pending, aborted ones included, and the current ones)."""
        self.enabled = True
        earlier = self._captured.get(checkpoint_id)  # an aborted attempt of the same checkpoint
        if earlier is None:
            self._captured[checkpoint_id] = self.dirty
        else:
            for cells, new in zip(earlier, self.dirty):
                cells |= new
        self.dirty = [set() for _ in range(len(self.key_groups))]
        union = [set() for _ in range(len(self.key_groups))]
        for captured in self._captured.values():
            for index, cells in enumerate(captured):
                if cells:
                    union[index] |= cells
        return union

    def written(self, checkpoint_id: int, handle: ChangelogStateHandle) -> None:
        if checkpoint_id > self._last_completed:
            self._written[checkpoint_id] = handle

    def full(self, checkpoint_id: int) -> None:
        """A full checkpoint was taken. Once it completes, the next delta must not build on the
        chain of an earlier checkpoint: retention may delete that checkpoint and its files."""
        if checkpoint_id > self._last_completed:
            self._written[checkpoint_id] = None

    def complete(self, checkpoint_id: int) -> None:
        if checkpoint_id not in self._written:
            return  # not a checkpoint of this instance, or one a newer completed checkpoint subsumes
        self._last_completed = checkpoint_id
        self.chain = self._written[checkpoint_id]
        for done in [c for c in self._captured if c <= checkpoint_id]:
            del self._captured[done]
        for done in [c for c in self._written if c <= checkpoint_id]:
            del self._written[done]

    def abort(self, checkpoint_id: int) -> None:
        # its cells stay captured: the next delta must still contain them
        self._written.pop(checkpoint_id, None)

    def rebase(self) -> None:
        """The next incremental snapshot writes a new base: a state was rewritten in place (its
        values migrated), so a delta would build on a chain of the old format."""
        self.chain = None

    def adopt(self, handle: KeyedStateHandle, exact_range: bool) -> None:
        """After restoring ``handle`` as the whole state of this range, later deltas may build on it."""
        if exact_range and isinstance(handle, ChangelogStateHandle):
            self.chain = handle
            self.enabled = True


def restore_chain(handle: ChangelogStateHandle, streams: CheckpointStreams, target: KeyGroupRange,
                  load_base: Callable[[int, Any], None], apply_delta: Callable[[int, Any], None],
                  key_groups_of: KeyGroupsOf | None = None) -> None:
    """Base, then every delta in order, reading only the key groups of ``target`` (keys checked
    with ``key_groups_of``, ``read_key_groups``)."""
    key_groups = handle.restore_key_groups(target)
    for key_group, batch in read_key_groups(handle.base, streams, key_groups, key_groups_of):
        load_base(key_group, batch)
    for delta in handle.deltas:
        for key_group, batch in read_key_groups(delta, streams, key_groups, key_groups_of):
            apply_delta(key_group, batch)


def split_ops(batch: Any) -> tuple[list[int], Any]:
    """The row indices of DELETE rows, and the batch of PUT rows (op column dropped)."""
    import pyarrow.compute as pc

    ops = batch.column("op")
    deletes = [i for i, op in enumerate(ops.to_pylist()) if op == OP_DELETE]
    puts = batch.filter(pc.equal(ops, OP_PUT)).select([name for name in batch.schema.names if name != "op"])
    return deletes, puts
