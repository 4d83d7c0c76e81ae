"""Queryable state: one key's state as of a job's latest completed checkpoint (or a given one).

::

    from statekit.query import QueryableState

    state = QueryableState("s3://bucket/checkpoints/my-job")   # its latest completed checkpoint
    state.get("count", "sensor-7")                             # -> 42
    state.refresh()                                            # move to the newest checkpoint

A lookup reads only the key's key group: in a full checkpoint or a savepoint, the byte range of
that key group in one file; in an incremental checkpoint, the files the subtask holding it
restores from (RocksDB's SST files or a changelog chain), restored for that one key group.

Unlike Flink's queryable state, which asks the running job's task managers and may see
uncommitted, later-rolled-back updates, this reads the state of a completed checkpoint: what it
returns is consistent across keys and states, survives the job being down, and is never
ahead of what the job's output reflects; it lags the running job by up to one epoch.
"""
from __future__ import annotations

from typing import Any

from statekit.checkpoint.metadata import OperatorState
from statekit.backends.common.namespaces import VOID_NAMESPACE_BYTES, encode_namespace
from statekit.reading.cells import StateCell, restored_serializer
from statekit.reading.snapshot_reader import KeyColumn, SnapshotReader, snapshot_url
from statekit.spi.descriptors import StateKind
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import VOID_NAMESPACE


class QueryableState:
    """Point lookups in a completed checkpoint or savepoint (see the module documentation)."""

    def __init__(self, path: str | None = None, *, checkpoint_dir: str | None = None, job_id: str | None = None,
                 checkpoint_id: int | None = None, operator: str | None = None,
                 storage_options: dict[str, Any] | None = None, trust_pickle: bool = False) -> None:
        """``trust_pickle``: decode state that runs code when read (pickle); else it keeps its bytes."""
        self._url = snapshot_url(path, checkpoint_dir, job_id, checkpoint_id)
        self._operator_id = operator
        self._storage_options = storage_options
        self._trust_pickle = trust_pickle
        self.refresh()

    def refresh(self) -> None:
        """Read the snapshot again: a job directory moves to its newest completed checkpoint."""
        self._reader = SnapshotReader.open(self._url, self._storage_options, trust_pickle=self._trust_pickle)
        self._operator: OperatorState = self._reader.operator(self._operator_id)

    @property
    def url(self) -> str:
        """The snapshot the lookups read."""
        return self._reader.url

    @property
    def checkpoint_id(self) -> int:
        return self._reader.metadata.checkpoint_id

    @property
    def key_columns(self) -> tuple[KeyColumn, ...] | None:
        return self._reader.key_columns(self._operator)

    def kind(self, state: str) -> str:
        states = self._reader.states(self._operator)
        if state not in states:
            raise ConfigurationError(f"{self.url} holds no state {state!r} in operator "
                                     f"{self._operator.operator_id!r}; it holds {sorted(states)}")
        return states[state].kind

    def key_group(self, key: Any) -> int:
        return self._reader.key_group_of(self._operator, key)

    def cells(self, key: Any, states: list[str] | None = None) -> list[StateCell]:
        """Every cell of ``key`` (of ``states`` only, when given), in every namespace."""
        return list(self._reader.cells_of_key(self._operator, key, states))

    def get(self, state: str, key: Any, namespace: Any = VOID_NAMESPACE) -> Any:
        """The state of ``key`` as the job's function would read it: a value, reducing or
        aggregating state's value (an aggregating state's accumulator) or None; a list state's
        elements; a map state's dict; a timer state's timestamps, ascending."""
        kind = self.kind(state)
        wanted = self._namespace_bytes(state, namespace)
        cells = [c for c in self.cells(key, [state]) if c.namespace_bytes == wanted]
        undecoded = next((c.error for c in cells if c.error), None)
        if undecoded:
            raise ConfigurationError(f"state {state!r} of key {key!r} cannot be decoded here: {undecoded}")
        if kind == StateKind.LIST.value:
            return [c.value for c in cells]
        if kind == StateKind.MAP.value:
            return {c.user_key: c.value for c in cells}
        if kind == StateKind.TIMERS.value:
            return sorted(c.user_key for c in cells)
        return cells[0].value if cells else None

    def _namespace_bytes(self, state: str, namespace: Any) -> bytes:
        """``namespace`` as ``state`` stores it: a namespace is its bytes, as in every backend."""
        if namespace is VOID_NAMESPACE:
            return VOID_NAMESPACE_BYTES
        serializer = restored_serializer(self._reader.states(self._operator)[state].serializers["namespace"])
        if not isinstance(serializer, TypeSerializer):
            raise ConfigurationError(f"namespace {namespace!r} of state {state!r} cannot be looked up here: "
                                     f"{serializer.reason}")
        return encode_namespace(namespace, serializer)
