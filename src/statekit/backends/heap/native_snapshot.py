"""Full heap checkpoints in the heap's own format (``SnapshotFormat.NATIVE``): every key group's maps
(``state -> namespace -> key -> value``, as ``state_table`` holds them) pickled as they are, one
pickle per key group in one stream, indexed by key group as canonical snapshots are.

Pickle walks the held objects in C: no serializer call and no Arrow cell per entry. Writing is
bound, as the canonical writer is, by reading the held objects from memory (0.82-0.85x the
canonical seconds in ``benchmarks/checkpointing.py``); restoring builds the maps without a
deserializer call per cell (0.18-0.19x the canonical restore's seconds). The price is the
canonical format's guarantees: loading a pickle runs code it names, so a job restores these
snapshots only where it trusts the checkpoint (``spark.statekit.restore.trust-pickle``, or a
signature); only the heap backend reads it back (at any parallelism: a restore reads only its
key groups), savepoints stay canonical, and every held value must pickle (a value
that does not fails the checkpoint with the state's name; the canonical format writes it with the
state's serializer) and unpickle where the job restores (its class importable there). Expired
TTL entries are written as held and dropped on access or by the sweep after a restore, as in the
KV backends' native snapshots.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from statekit.backends.common.canonical import key_group_bytes
from statekit.backends.heap.state_table import KeyGroupMap, SharedTables, SharedTablesSnapshot, StateTable
from statekit.spi.errors import CorruptStateError, RestoreError, SnapshotError
from statekit.spi.handles import (
    ByteRange, RecordedStates, StateHandle, StateMetaInfo, StreamStateHandle, checksum, key_group_index_json,
    nested_handle, read_key_group_index, read_key_group_range, read_serializer_snapshot, register_handle,
)
from statekit.spi.json_fields import JsonObject, malformed
from statekit.spi.key_groups import KeyGroupRange, canonical_key
from statekit.spi.serializer import require_trust
from statekit.spi.storage import CheckpointStreams, StateScope

#: pickle protocol 5 (Python 3.8+): out-of-band buffers aside, the densest and fastest one
PICKLE_PROTOCOL = 5
#: the layout the pickles hold (the heap's held objects: ``copies.SerializedKey``, TTL entries, timer
#: sets, the map nesting); a change to any of them is a new format, which older readers refuse
FORMAT = "heap-pickle-v1"
#: the key types a restored map is rebuilt for (``canonical_key``: every NaN is one object, which
#: an unpickled NaN is not)
_FLOAT_KEY_TYPES = frozenset({float, tuple})


@register_handle("heap-native")
@dataclass(frozen=True)
class NativeHeapStateHandle(RecordedStates):
    key_group_range: KeyGroupRange
    stream: StreamStateHandle
    key_groups: dict[int, ByteRange]  # the pickle of each key group with state
    key_serializer: dict[str, Any]
    states: tuple[StateMetaInfo, ...]
    format: str = FORMAT

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield self.stream

    def _fields_json(self) -> dict[str, Any]:
        return {"key_group_range": self.key_group_range.to_json(), "stream": self.stream.to_json(),
                "key_groups": key_group_index_json(self.key_groups), "key_serializer": self.key_serializer,
                "states": [s.to_json() for s in self.states], "format": self.format}

    @classmethod
    def _from_fields(cls, data: JsonObject) -> "NativeHeapStateHandle":
        data.expect_fields(("type", "key_group_range", "stream", "key_groups", "key_serializer", "states", "format"))
        if data.text("format") != FORMAT:
            malformed(data.path_of("format"), f"is {data.text('format')!r}, a native heap format this statekit does "
                      f"not read (it reads {FORMAT!r}): restore with the statekit release that wrote the checkpoint, "
                      f"or from a savepoint", show_value=False)
        key_group_range = read_key_group_range(data)
        stream = nested_handle(data, "stream", StreamStateHandle)
        return cls(key_group_range, stream, read_key_group_index(data, "key_groups", key_group_range, stream),
                   read_serializer_snapshot(data, "key_serializer"),
                   tuple(StateMetaInfo.from_json(s) for s in data.array("states").objects()))


class NativeHeapSnapshot(SharedTablesSnapshot):
    """The key-group maps shared at the synchronous part (copy-on-write, as for canonical
    snapshots), pickled key group by key group by ``write``."""

    def __init__(self, shared: SharedTables, key_group_range: KeyGroupRange, metas: list[StateMetaInfo],
                 key_serializer: dict[str, Any]) -> None:
        super().__init__(shared)
        self._key_group_range = key_group_range
        self._metas = metas
        self._key_serializer = key_serializer

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        self._check_unreleased()
        try:
            views = {name: view for name, (_, view, _) in self._shared.items()}
            if not any(any(view) for view in views.values()):
                return None
            out = streams.create_output(StateScope.EXCLUSIVE, name="keyed-heap")
            try:
                index: dict[int, ByteRange] = {}
                for position, key_group in enumerate(self._key_group_range):
                    maps = {name: view[position] for name, view in views.items() if view[position]}
                    if maps:
                        data = _pickled(maps, key_group)
                        index[key_group] = ByteRange(out.tell(), len(data), checksum(data))
                        out.write(data)
                stream = out.close_and_get_handle()
            except BaseException:
                out.discard()
                raise
            return NativeHeapStateHandle(self._key_group_range, stream, index, self._key_serializer,
                                         tuple(self._metas))
        finally:
            self.release()


def _pickled(maps: dict[str, KeyGroupMap], key_group: int) -> bytes:
    try:
        return pickle.dumps(maps, PICKLE_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - anything a value's pickling raises: name the state that holds it
        for name, group in maps.items():
            try:
                pickle.dumps(group, PICKLE_PROTOCOL)
            except Exception:  # noqa: BLE001
                raise SnapshotError(
                    f"native heap checkpoint: state {name!r} holds a value in key group {key_group} that pickle "
                    f"cannot write ({type(exc).__name__}: {exc}); the native format pickles the held objects. Set "
                    f"spark.statekit.checkpoint.format=canonical, which writes them with the state's serializer"
                ) from exc
        raise


def restore(handles: Sequence[NativeHeapStateHandle], streams: CheckpointStreams, target: KeyGroupRange,
            tables: dict[str, StateTable]) -> None:
    """Load the key groups of ``target`` from ``handles`` into ``tables`` (the restored states'
    tables, known from the handles' state metas). Pickles run code as they load: only from a
    trusted or signed checkpoint (``spi.serializer.trusting``)."""
    if handles:
        require_trust("a native heap snapshot (the held objects, pickled)")
    for handle in handles:
        for key_group, data in key_group_bytes(handle.stream, handle.key_groups, target, streams):
            try:
                maps = pickle.loads(data)
            except (ImportError, AttributeError) as exc:  # a held value's class, gone from where the job restores
                raise RestoreError(f"key group {key_group} of a native heap checkpoint holds a value whose class "
                                   f"cannot be loaded here ({type(exc).__name__}: {exc}); make its module importable "
                                   f"on the executors, or restore from a savepoint or a canonical checkpoint, whose "
                                   f"values the state's serializer reads") from exc
            except Exception as exc:  # noqa: BLE001 - bytes that passed the checksum yet do not unpickle
                raise CorruptStateError(f"key group {key_group} of a native heap checkpoint cannot be read: "
                                        f"{type(exc).__name__}: {exc}. Restore from an earlier checkpoint or "
                                        f"savepoint") from exc
            index = key_group - target.start
            for name, group in maps.items():
                table = tables.get(name)
                if table is None:
                    raise RestoreError(f"key group {key_group} of a native heap checkpoint holds state {name!r}, "
                                       f"which its handle does not describe; restore from an earlier checkpoint "
                                       f"or savepoint")
                writable = table.writable(index)
                for namespace, entries in group.items():
                    if not _FLOAT_KEY_TYPES.isdisjoint(map(type, entries)):
                        entries = {canonical_key(key): value for key, value in entries.items()}
                    held = writable.get(namespace)
                    if held is None:
                        writable[namespace] = entries
                    else:
                        held.update(entries)
