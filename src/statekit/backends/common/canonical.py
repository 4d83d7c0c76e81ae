"""The canonical snapshot format: backend-independent, used for full snapshots and savepoints.

One Arrow IPC *file* per keyed snapshot with columns ``state, key, namespace, user_key, value``.
Record batches are grouped by key group in ascending order; the handle records, per key group,
the byte range of its batches and that range's checksum. Restoring a key-group range therefore
reads (and verifies) only the bytes of its key groups, and the file remains a valid Arrow IPC
file any Arrow tool can open.
Its record batches may be compressed (Arrow IPC body compression, lz4 or zstd, chosen by the
backends' ``snapshot-compression`` option); each batch says so itself, so a reader needs no
setting and files of every choice, and those written before there was a choice, read alike.

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

from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.backends.common.snapshot_sink import CHUNK_BYTES, HashingSink
from statekit.backends.common.ttl import TIMESTAMP
from statekit.spi.descriptors import StateKind
from statekit.spi.errors import ConfigurationError, CorruptStateError, SnapshotError
from statekit.spi.handles import ByteRange, KeyGroupsStateHandle, StateMetaInfo, StreamStateHandle, verify_checksum
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.options import Option, choice
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
#: repeated column values (state names, namespaces, ...) a writer keeps, and their least length
MAX_REPEATS = 64
MIN_REPEAT = 1024
#: how the record batches' buffers may be compressed (Arrow IPC body compression, per batch)
COMPRESSIONS = ("none", "lz4", "zstd")
#: measured fastest on incompressible values, and cheapest to restore (``benchmarks/checkpointing.py``)
DEFAULT_COMPRESSION = "none"
#: the backend option that chooses it, ``spark.statekit.backend.<name>.snapshot-compression``
SNAPSHOT_COMPRESSION_OPTION = Option(
    "snapshot-compression", choice(*COMPRESSIONS), DEFAULT_COMPRESSION,
    "compression of full, savepoint and changelog snapshot files (none, lz4 or zstd); read back whatever it was")


def ipc_write_options(compression: str) -> pa.ipc.IpcWriteOptions:
    """Arrow IPC options that compress with ``compression`` (one of ``COMPRESSIONS``)."""
    if compression not in COMPRESSIONS:
        raise ConfigurationError(f"snapshot compression must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    return pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)


def _column(values: pa.Array | Sequence[Any], type: pa.DataType) -> pa.Array:
    return values if isinstance(values, pa.Array) else pa.array(values, type)


def _write_times(values: pa.Array) -> np.ndarray:
    """The write time of each TTL entry of ``values`` (``ttl.timestamp_of`` of each, at once)."""
    offsets = np.frombuffer(values.buffers()[1], np.int32, len(values), values.offset * 4)
    data = np.frombuffer(values.buffers()[2], np.uint8)
    return data[offsets[:, None] + np.arange(TIMESTAMP.size)].copy().view(">i8")[:, 0]


class CanonicalSnapshotWriter:
    """Writes one keyed snapshot; call ``add_columns`` (or ``add_rows``) for key groups in
    ascending order.

    ``format=CHANGELOG_FORMAT`` writes a changelog delta: every row then has an ``op``.
    ``expired`` (state name -> deadline, ``ttl.expiry_deadlines``) leaves out the rows of states
    with TTL written at or before their deadline: full snapshots clean up expired entries.
    ``compression`` (one of ``COMPRESSIONS``) compresses the record batches' buffers; a reader
    finds it in each batch, so snapshots of every choice are read alike."""

    def __init__(self, out: CheckpointOutputStream, format: str = FORMAT,
                 expired: Mapping[str, int] | None = None, compression: str = DEFAULT_COMPRESSION) -> None:
        if expired and format != FORMAT:
            raise SnapshotError("expired entries are left out of full snapshots only")
        self._expired = expired or {}
        self._out = out
        self._format = format
        self._schema = SCHEMAS[format]
        self._sink = HashingSink(out)
        # the IPC writer writes each buffer of a batch on its own: Arrow's buffer gathers them, and
        # is flushed to the sink where a key group ends
        self._buffered = pa.BufferedOutputStream(pa.PythonFile(self._sink, mode="w"), CHUNK_BYTES)
        self._writer = pa.ipc.new_file(self._buffered, self._schema, options=ipc_write_options(compression))
        # the IPC writer emits magic and schema with the first batch: write an empty one now so
        # every later batch's bytes start at a known offset
        self._writer.write_batch(pa.RecordBatch.from_pylist([], schema=self._schema))
        self._buffered.flush()
        self._sink.cut()
        self._current_kg: int | None = None
        self._kg_start = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._ranges: dict[int, ByteRange] = {}
        self._repeats: dict[tuple[Any, pa.DataType], pa.Array] = {}

    def add_rows(self, key_group: int, state: str, keys: Sequence[bytes], namespaces: Sequence[bytes],
                 user_keys: Sequence[bytes | None] | None, values: Sequence[bytes],
                 ops: Sequence[int] | None = None) -> None:
        """Rows of one state in one key group as Python sequences (``add_columns``)."""
        self.add_columns(key_group, state, _column(keys, pa.binary()), _column(namespaces, pa.binary()),
                         None if user_keys is None else _column(user_keys, pa.binary()),
                         _column(values, pa.binary()), None if ops is None else _column(ops, pa.int8()))

    def add_columns(self, key_group: int, state: str, keys: pa.Array, namespaces: pa.Array | bytes,
                    user_keys: pa.Array | None, values: pa.Array | bytes, ops: pa.Array | int | None = None) -> None:
        """Rows of one state in one key group as binary Arrow arrays: ``namespaces`` and ``values``
        may be the one namespace or value of every row, ``user_keys=None`` means no user key, and
        ``ops`` (only and always in a changelog delta) may be the one operation of every row."""
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
        if isinstance(namespaces, bytes):
            namespaces = self._repeated(namespaces, n, pa.binary())
        if isinstance(values, bytes):
            values = self._repeated(values, n, pa.binary())
        if isinstance(ops, int):
            ops = self._repeated(ops, n, pa.int8())
        if not len(namespaces) == len(values) == n or any(c is not None and len(c) != n for c in (user_keys, ops)):
            raise SnapshotError(f"state {state!r}: column lengths differ")
        if not n:
            return
        columns = [self._repeated(state, n, pa.string()), keys, namespaces,
                   user_keys if user_keys is not None else pa.nulls(n, pa.binary()), values]
        if ops is not None:
            columns.append(ops)
        batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        deadline = self._expired.get(state)
        if deadline is not None:
            batch = batch.filter(pa.array(_write_times(values) > deadline))
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        if self._pending_rows >= MAX_BATCH_ROWS:
            self._flush()

    def _repeated(self, value: Any, n: int, type: pa.DataType) -> pa.Array:
        """``value`` ``n`` times: a slice of an array kept per value (``pa.repeat`` takes tens of
        microseconds a call, several calls per key group)."""
        held = self._repeats.get((value, type))
        if held is None or len(held) < n:
            if len(self._repeats) >= MAX_REPEATS:  # many namespaces: a bound on the memory kept
                self._repeats.clear()
            held = self._repeats[(value, type)] = pa.repeat(pa.scalar(value, type), max(n, MIN_REPEAT))
        return held.slice(0, n)

    def _flush(self) -> None:
        pending, self._pending, self._pending_rows = self._pending, [], 0
        if len(pending) > 1:
            pending = pa.Table.from_batches(pending, self._schema).combine_chunks().to_batches()
        for batch in pending:
            for start in range(0, batch.num_rows, MAX_BATCH_ROWS):
                self._writer.write_batch(batch.slice(start, MAX_BATCH_ROWS))

    def _end_key_group(self) -> None:
        self._flush()
        self._buffered.flush()
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
        self._buffered.flush()
        if not self._ranges:
            self.abort()
            return None
        self._sink.finish()
        stream = self._out.close_and_get_handle()
        version = 2 if any(s.kind == StateKind.TIMERS.value for s in states) else 1
        return KeyGroupsStateHandle(key_group_range, stream, self._ranges,
                                    key_serializer.to_json(), tuple(states), self._format, version)

    def abort(self) -> None:
        self._sink.abort()
        self._out.discard()


#: each of distinct stored keys (a binary Arrow array) as a key, with its key group as the job computes it
KeyGroupsOf = Callable[[pa.Array], Iterable[tuple[Any, int]]]


def read_key_groups(handle: KeyGroupsStateHandle, streams: CheckpointStreams, key_groups: KeyGroupRange,
                    key_groups_of: KeyGroupsOf | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Yield ``(key_group, batch)`` for every batch of the key groups in ``key_groups``.

    Contiguous key groups are fetched with one range read; each key group's bytes are
    verified against its checksum before they are parsed. With ``key_groups_of``, every key of
    a batch must belong to the key group the index gives the batch: the checksums cover the
    bytes, not the key group an index entry names.
    """
    schema = SCHEMAS.get(handle.format)
    if schema is None:
        raise CorruptStateError(f"unsupported keyed snapshot format {handle.format!r}; known: {sorted(SCHEMAS)}")
    for kg, part in key_group_bytes(handle.stream, handle.key_groups, key_groups, streams):
        for batch in _parse_batches(part, handle, kg, schema):
            if key_groups_of is not None:
                _check_key_group(batch, kg, key_groups_of, handle.stream)
            yield kg, batch


def _check_key_group(batch: pa.RecordBatch, kg: int, key_groups_of: KeyGroupsOf, stream: StreamStateHandle) -> None:
    for key, found in key_groups_of(pc.unique(batch.column("key"))):
        if found != kg:
            raise CorruptStateError(
                f"key group {kg} of {_describe(stream)} holds the key {key!r}, which belongs to key group {found}: its handle's key-group index was changed, or this job computes key "
                f"groups otherwise than the one that wrote the snapshot (other key types: give the ones recorded in "
                f"the metadata's key_schema property). Restore from another checkpoint or savepoint")


def key_group_bytes(stream: StreamStateHandle, index: dict[int, ByteRange], key_groups: KeyGroupRange,
                    streams: CheckpointStreams) -> Iterator[tuple[int, memoryview]]:
    """Yield ``(key_group, bytes)`` for every key group of ``key_groups`` in ``index`` (the byte
    ranges of ``stream``), each verified against its checksum before it is yielded. A restore
    that wants every key group of the stream reads it whole, verified against its size and the
    checksum of the whole file too (its Arrow header and footer, which no key group's checksum
    covers); otherwise contiguous key groups are fetched with one range read (then all the
    bytes the restore relies on are its key groups')."""
    wanted = sorted((kg, r) for kg, r in index.items() if kg in key_groups)
    whole = bool(wanted) and len(wanted) == len(index)
    for run in [wanted] if whole else _contiguous_runs(wanted):
        start, end = (0, stream.size) if whole else (run[0][1].offset, run[-1][1].end)
        data = memoryview(streams.read(stream) if whole else streams.read_range(stream, start, end - start))
        for kg, byte_range in run:
            part = data[byte_range.offset - start:byte_range.end - start]
            verify_checksum(part, byte_range.checksum, f"key group {kg} of {_describe(stream)}")
            yield kg, part


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
        raise CorruptStateError(f"key group {kg} of {_describe(handle.stream)} cannot be parsed: {exc}") from exc


def _describe(stream: StreamStateHandle) -> str:
    stored_as = stream.stored_as
    return f"snapshot stream {stored_as!r}" if stored_as else "an inline snapshot"
