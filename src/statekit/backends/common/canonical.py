"""The canonical snapshot format: backend-independent, used for full snapshots and savepoints.

One Arrow IPC *file* per keyed snapshot with columns ``state, key, namespace, user_key, value``.
Record batches are grouped by key group in ascending order; the handle records, per key group,
the byte range of its batches and that range's checksum. Restoring a key-group range therefore
reads (and verifies) only the bytes of its key groups, and the file remains a valid Arrow IPC
file any Arrow tool can open.

Rows per state kind:
  value, reducing, aggregating  one row; ``user_key`` null
  list                          one row per element, in list order; ``user_key`` null
  map                           one row per entry; ``user_key`` is the serialized map key
  timers                        one row per timer; ``user_key`` is its timestamp
                                (``key_layout.timestamp_bytes``), ``value`` empty

The handle's ``format_version`` says which kinds a snapshot may hold: 1 the first five, 2 timers
too. A writer records the lowest version its states need, so a snapshot without timers stays
readable by releases that know version 1 only.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
import xxhash

from statekit.backends.common.ttl import timestamp_of
from statekit.spi.descriptors import StateKind
from statekit.spi.errors import CorruptStateError, SnapshotError
from statekit.spi.handles import ByteRange, KeyGroupsStateHandle, StateMetaInfo, verify_checksum
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.serializer import SerializerSnapshot
from statekit.spi.storage import CheckpointOutputStream, CheckpointStreams

FORMAT = "canonical-arrow-v1"
SCHEMA = pa.schema([
    pa.field("state", pa.string(), nullable=False),
    pa.field("key", pa.binary(), nullable=False),
    pa.field("namespace", pa.binary(), nullable=False),
    pa.field("user_key", pa.binary()),
    pa.field("value", pa.binary(), nullable=False),
])
#: a changelog delta: canonical rows plus the operation of each row (see ``changelog``)
CHANGELOG_FORMAT = "changelog-arrow-v1"
CHANGELOG_SCHEMA = SCHEMA.append(pa.field("op", pa.int8(), nullable=False))
SCHEMAS = {FORMAT: SCHEMA, CHANGELOG_FORMAT: CHANGELOG_SCHEMA}
#: rows per record batch; a key group with more rows spans several batches
MAX_BATCH_ROWS = 64 * 1024


@dataclass
class _Columns:
    state: list[str]
    key: list[bytes]
    namespace: list[bytes]
    user_key: list[bytes | None]
    value: list[bytes]
    op: list[int]

    @classmethod
    def empty(cls) -> "_Columns":
        return cls([], [], [], [], [], [])

    def __len__(self) -> int:
        return len(self.key)


class HashingSink(io.RawIOBase):
    """Forwards writes to a checkpoint stream and checksums them in segments (``cut``)."""

    def __init__(self, out: CheckpointOutputStream) -> None:
        self._out = out
        self._position = out.tell()
        self._hasher = xxhash.xxh3_64()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def,override]
        self._out.write(data)
        self._hasher.update(data)
        n = memoryview(data).nbytes
        self._position += n
        return n

    def tell(self) -> int:
        return self._position

    def cut(self) -> str:
        """The checksum of the bytes since the previous cut (same function as ``checksum``)."""
        digest = self._hasher.hexdigest()
        self._hasher.reset()
        return digest


class CanonicalSnapshotWriter:
    """Writes one keyed snapshot; call ``add_rows`` for key groups in ascending order.

    ``format=CHANGELOG_FORMAT`` writes a changelog delta: every row then has an ``op``.
    ``expired`` (state name -> deadline, ``ttl.expiry_deadlines``) leaves out the rows of states
    with TTL written at or before their deadline: full snapshots clean up expired entries."""

    def __init__(self, out: CheckpointOutputStream, format: str = FORMAT,
                 expired: Mapping[str, int] | None = None) -> None:
        if expired and format != FORMAT:
            raise SnapshotError("expired entries are left out of full snapshots only")
        self._expired = expired or {}
        self._out = out
        self._format = format
        self._schema = SCHEMAS[format]
        self._sink = HashingSink(out)
        self._writer = pa.ipc.new_file(self._sink, self._schema)
        # the IPC writer emits magic and schema with the first batch: write an empty one now so
        # every later batch's bytes start at a known offset
        self._writer.write_batch(pa.RecordBatch.from_pylist([], schema=self._schema))
        self._sink.cut()
        self._current_kg: int | None = None
        self._kg_start = 0
        self._pending = _Columns.empty()
        self._ranges: dict[int, ByteRange] = {}

    def add_rows(self, key_group: int, state: str, keys: Sequence[bytes], namespaces: Sequence[bytes],
                 user_keys: Sequence[bytes | None] | None, values: Sequence[bytes],
                 ops: Sequence[int] | None = None) -> None:
        """Rows of one state in one key group (``user_keys=None``: no user key; ``ops`` only
        and always for a changelog delta)."""
        if (ops is None) != (self._format == FORMAT):
            raise SnapshotError(f"row operations are {'required' if ops is None else 'not allowed'} "
                                f"in the {self._format} format")
        if key_group != self._current_kg:
            if self._current_kg is not None and key_group < self._current_kg:
                raise SnapshotError(f"key groups must be written in ascending order "
                                    f"({key_group} after {self._current_kg})")
            self._end_key_group()
            self._current_kg = key_group
            self._kg_start = self._sink.tell()
        n = len(keys)
        if not len(namespaces) == len(values) == n or (user_keys is not None and len(user_keys) != n):
            raise SnapshotError(f"state {state!r}: column lengths differ")
        deadline = self._expired.get(state)
        if deadline is not None:
            alive = [i for i, value in enumerate(values) if timestamp_of(value) > deadline]
            if len(alive) < n:
                keys, namespaces, values = [keys[i] for i in alive], [namespaces[i] for i in alive], \
                    [values[i] for i in alive]
                user_keys = None if user_keys is None else [user_keys[i] for i in alive]
                n = len(alive)
        p = self._pending
        p.state.extend([state] * n)
        p.key.extend(keys)
        p.namespace.extend(namespaces)
        p.user_key.extend(user_keys if user_keys is not None else [None] * n)
        p.value.extend(values)
        if ops is not None:
            p.op.extend(ops)
        if len(p) >= MAX_BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        p = self._pending
        if not len(p):
            return
        arrays = [pa.array(p.state, pa.string()), pa.array(p.key, pa.binary()),
                  pa.array(p.namespace, pa.binary()), pa.array(p.user_key, pa.binary()),
                  pa.array(p.value, pa.binary())]
        if self._format == CHANGELOG_FORMAT:
            arrays.append(pa.array(p.op, pa.int8()))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        self._writer.write_batch(batch)
        self._pending = _Columns.empty()

    def _end_key_group(self) -> None:
        self._flush()
        if self._current_kg is not None:
            end = self._sink.tell()
            if end > self._kg_start:
                self._ranges[self._current_kg] = ByteRange(self._kg_start, end - self._kg_start,
                                                           self._sink.cut())

    def finish(self, key_group_range: KeyGroupRange, key_serializer: SerializerSnapshot,
               states: Sequence[StateMetaInfo]) -> KeyGroupsStateHandle | None:
        """Close the file and return its handle, or ``None`` (file discarded) if it holds no rows."""
        self._end_key_group()
        self._writer.close()
        if not self._ranges:
            self._out.discard()
            return None
        stream = self._out.close_and_get_handle()
        version = 2 if any(s.kind == StateKind.TIMERS.value for s in states) else 1
        return KeyGroupsStateHandle(key_group_range, stream, self._ranges,
                                    key_serializer.to_json(), tuple(states), self._format, version)

    def abort(self) -> None:
        self._out.discard()


def read_key_groups(handle: KeyGroupsStateHandle, streams: CheckpointStreams,
                    key_groups: KeyGroupRange) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Yield ``(key_group, batch)`` for every batch of the key groups in ``key_groups``.

    Contiguous key groups are fetched with one range read; each key group's bytes are
    verified against its checksum before they are parsed.
    """
    schema = SCHEMAS.get(handle.format)
    if schema is None:
        raise CorruptStateError(f"unsupported keyed snapshot format {handle.format!r}; known: {sorted(SCHEMAS)}")
    wanted = sorted((kg, r) for kg, r in handle.key_groups.items() if kg in key_groups)
    for run in _contiguous_runs(wanted):
        start, end = run[0][1].offset, run[-1][1].end
        data = memoryview(streams.read_range(handle.stream, start, end - start))
        for kg, byte_range in run:
            part = data[byte_range.offset - start:byte_range.end - start]
            verify_checksum(part, byte_range.checksum, f"key group {kg} of {_describe(handle)}")
            yield from ((kg, batch) for batch in _parse_batches(part, handle, kg, schema))


def state_runs(states: Sequence[str]) -> Iterator[tuple[str, int, int]]:
    """``(state, start, end)`` of each run of rows of one state (writers keep them contiguous)."""
    n = len(states)
    start = 0
    while start < n:
        name = states[start]
        end = start + 1
        while end < n and states[end] == name:
            end += 1
        yield name, start, end
        start = end


def _contiguous_runs(ranges: list[tuple[int, ByteRange]]) -> Iterator[list[tuple[int, ByteRange]]]:
    run: list[tuple[int, ByteRange]] = []
    for item in ranges:
        if run and run[-1][1].end != item[1].offset:
            yield run
            run = []
        run.append(item)
    if run:
        yield run


def _parse_batches(data: memoryview, handle: KeyGroupsStateHandle, kg: int,
                   schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    reader = pa.BufferReader(pa.py_buffer(data))
    try:
        while reader.tell() < len(data):
            yield pa.ipc.read_record_batch(pa.ipc.read_message(reader), schema)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptStateError(f"key group {kg} of {_describe(handle)} cannot be parsed: {exc}") from exc


def _describe(handle: KeyGroupsStateHandle) -> str:
    stored_as = handle.stream.stored_as
    return f"snapshot stream {stored_as!r}" if stored_as else "an inline snapshot"
