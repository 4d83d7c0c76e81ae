"""Reading a completed checkpoint or savepoint as state cells, key-group range by key-group range.

A range whose handles are all in the canonical format (full checkpoints, savepoints) is read
straight from its files, only the byte ranges of its key groups. Any other range (RocksDB's
shared SST files, a changelog chain, a plugin's own format) is restored into the backend that
wrote the checkpoint and snapshotted to memory in the canonical format first, as a savepoint
conversion does, so every backend's checkpoints read alike. Either way, TTL entries expired at
the checkpoint's own processing time (event-time TTL: its own watermark) are left out, as a
restore would drop them.
"""
from __future__ import annotations

import posixpath
import struct
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from statekit.backends.common.canonical import FORMAT, read_key_groups
from statekit.backends.common.ttl import expiry_deadlines, timestamp_of
from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import OperatorState, read_metadata
from statekit.reading.cells import CellDecoder, StateCell
from statekit.registry import backend_class
from statekit.runtime.event_time import WATERMARK
from statekit.runtime.savepoints import convert_subtask
from statekit.runtime.task import PROCESSING_TIME
from statekit.checkpoint.signing import signing
from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import KeyedStateHandle, KeyGroupsStateHandle, StateMetaInfo
from statekit.spi.key_groups import KeyGroupRange, key_group_for_key
from statekit.spi.names import check_job_id
from statekit.spi.serializer import trusting
from statekit.spi.storage import CheckpointStreams, ResolvedCheckpoint
from statekit.spi.timers import MIN_TIMESTAMP
from statekit.storage.inline import InlineStreams
from statekit.storage.layout import METADATA_FILE
from statekit.storage.pointers import resolve

#: the checkpoint property with each operator's key columns: {operator id: [[name, Spark SQL type], ...]}
KEY_SCHEMA = "key_schema"


def snapshot_url(path: str | None = None, checkpoint_dir: str | None = None, job_id: str | None = None,
                 checkpoint_id: int | None = None, job_setting: str = "job_id") -> str:
    """The URL of a snapshot given as a path (a checkpoint, a savepoint, or a job directory for its
    latest checkpoint), or as a checkpoint directory, a job id (checked as jobs check theirs, so it
    names a directory inside the checkpoint directory; ``job_setting`` names it in errors) and an
    optional checkpoint id."""
    if path:
        if checkpoint_dir or job_id or checkpoint_id is not None:
            raise ConfigurationError("give either a path, or a checkpoint directory and a job id (and a checkpoint "
                                     "id), not both")
        return path
    if not checkpoint_dir or not job_id:
        raise ConfigurationError("say which state to read: a path (a checkpoint, savepoint or job directory), or a "
                                 "checkpoint directory and a job id")
    url = posixpath.join(checkpoint_dir.rstrip("/"), check_job_id(job_id, job_setting))
    return url if checkpoint_id is None else posixpath.join(url, f"chk-{checkpoint_id}")


@dataclass(frozen=True)
class KeyColumn:
    name: str
    #: its Spark SQL type name (``DataType.simpleString()``), which also says how it is hashed
    type: str


def recorded_key_columns(properties: Mapping[str, Any], operator_id: str) -> tuple[KeyColumn, ...] | None:
    """An operator's key columns as a checkpoint's properties record them (``KEY_SCHEMA``; None:
    not recorded, e.g. by a local runner without key types)."""
    recorded = properties.get(KEY_SCHEMA)
    columns = recorded.get(operator_id) if isinstance(recorded, dict) else None
    if not isinstance(columns, list) or not columns:
        return None
    return tuple(KeyColumn(str(name), str(type_name)) for name, type_name in columns)


class SnapshotReader:
    """A completed checkpoint or savepoint, opened for reading its keyed state. State that runs
    code when read (pickle) is decoded only with ``trust_pickle``; else its cells keep their bytes."""

    def __init__(self, resolved: ResolvedCheckpoint, trust_pickle: bool = False) -> None:
        self.url = resolved.pointer.external_pointer
        with signing():  # verified where a secret is in the environment
            self.metadata = read_metadata(resolved.metadata, resolved.pointer)
        self.streams: CheckpointStreams = resolved.streams
        self.trust_pickle = trust_pickle

    @classmethod
    def open(cls, url: str, storage_options: dict[str, Any] | None = None, setting: str = "path",
             trust_pickle: bool = False) -> "SnapshotReader":
        return cls(resolve(url, storage_options, setting), trust_pickle)

    def operator(self, operator_id: str | None = None) -> OperatorState:
        """The operator ``operator_id``, or the only one when not given."""
        operators = self.metadata.operators
        if operator_id is None:
            if len(operators) != 1:
                raise ConfigurationError(f"{self.url} holds operators {sorted(operators)}: say which one to read")
            return next(iter(operators.values()))
        if operator_id not in operators:
            raise ConfigurationError(f"{self.url} holds no operator {operator_id!r}; it holds {sorted(operators)}")
        return operators[operator_id]

    def states(self, operator: OperatorState) -> dict[str, StateMetaInfo]:
        return operator.states()

    def key_columns(self, operator: OperatorState) -> tuple[KeyColumn, ...] | None:
        """The job's key columns as recorded at checkpoint time (None: not recorded, e.g. the
        local runner's checkpoints)."""
        return recorded_key_columns(self.metadata.properties, operator.operator_id)

    def key_group_of(self, operator: OperatorState, key: Any) -> int:
        """The key group of ``key`` (a value, or a tuple for several key columns), hashed as the
        job's key columns are when they were recorded."""
        columns = self.key_columns(operator)
        types = [c.type for c in columns] if columns else None
        try:
            return key_group_for_key(key, operator.max_parallelism, types)
        except (ConfigurationError, struct.error, TypeError, AttributeError, OverflowError) as exc:
            described = ", ".join(f"{c.name} {c.type}" for c in columns) if columns else "not recorded"
            raise ConfigurationError(f"key {key!r} does not fit the job's key columns ({described}): {exc}; give a "
                                     f"value of each column's type (a tuple for several columns)") from None

    def batches(self, operator: OperatorState, index: int, parallelism: int, states: Sequence[str] | None = None,
                local_dir: str | None = None) -> Iterator[tuple[CellDecoder, int, pa.RecordBatch]]:
        """The canonical rows of the key groups of subtask ``index`` of ``parallelism``
        (``parallelism`` = max parallelism: one key group), of ``states`` only when given, as
        ``(decoder, key group, batch)``; TTL entries expired at the checkpoint are left out (by its
        recorded processing time and watermark; a time it did not record expires nothing)."""
        target = KeyGroupRange.of_subtask(operator.max_parallelism, parallelism, index)
        handles: Sequence[KeyedStateHandle] = assign(operator, index, parallelism).keyed
        streams = self.streams
        if not all(isinstance(h, KeyGroupsStateHandle) and h.format == FORMAT for h in handles):
            handles, streams = self._converted(operator, index, parallelism, local_dir), InlineStreams()
        times = [self.metadata.properties.get(name) for name in (PROCESSING_TIME, WATERMARK)]
        processing_time, watermark = (t if isinstance(t, int) else MIN_TIMESTAMP for t in times)
        wanted = pa.array(sorted(states), pa.string()) if states is not None else None
        for handle in handles:
            assert isinstance(handle, KeyGroupsStateHandle)
            metas = handle.state_meta_infos()
            deadlines = expiry_deadlines(metas, processing_time, watermark)
            with trusting(self.trust_pickle):
                decoder = CellDecoder(handle.key_serializer_snapshot(), metas)
            for key_group, batch in read_key_groups(handle, streams, target):
                if wanted is not None:
                    batch = batch.filter(pc.is_in(batch.column("state"), wanted))
                if deadlines:
                    batch = batch.filter(pa.array(_alive(batch, deadlines), pa.bool_()))
                if batch.num_rows:
                    yield decoder, key_group, batch

    def cells(self, operator: OperatorState, index: int, parallelism: int, states: Sequence[str] | None = None,
              local_dir: str | None = None) -> Iterator[StateCell]:
        """The decoded cells of ``batches``."""
        for decoder, key_group, batch in self.batches(operator, index, parallelism, states, local_dir):
            yield from decoder.cells(key_group, batch)

    def cells_of_key(self, operator: OperatorState, key: Any, states: Sequence[str] | None = None,
                     local_dir: str | None = None) -> Iterator[StateCell]:
        """The cells of one key, reading only its key group."""
        key_group = self.key_group_of(operator, key)
        for cell in self.cells(operator, key_group, operator.max_parallelism, states, local_dir):
            if cell.key == key:
                yield cell

    def _converted(self, operator: OperatorState, index: int, parallelism: int,
                   local_dir: str | None) -> tuple[KeyGroupsStateHandle, ...]:
        name = self.metadata.properties.get("backend") or "heap"
        state_backend = backend_class(str(name), setting=f"the backend recorded in {self.url}/{METADATA_FILE}")()
        with tempfile.TemporaryDirectory(prefix="statekit-read-", dir=local_dir) as work, trusting(self.trust_pickle):
            state = convert_subtask(self.metadata, operator, index, parallelism, self.streams, state_backend,
                                    lambda subtask: InlineStreams(), work)
        return tuple(h for h in state.keyed if isinstance(h, KeyGroupsStateHandle))


def _alive(batch: pa.RecordBatch, deadlines: dict[str, int]) -> list[bool]:
    """Per row: not a TTL entry written at or before its state's expiry deadline."""
    states, values = batch.column("state").to_pylist(), batch.column("value").to_pylist()
    return [(deadline := deadlines.get(state)) is None or timestamp_of(value) > deadline
            for state, value in zip(states, values)]
