"""The operator (non-keyed) state backend every statekit backend uses.

Operator state is small by nature, so it lives in Python lists and dicts; the synchronous
snapshot part copies them. Values are copied on the way in and out (``common.copies``), as
keyed state's are: a value read is the caller's own, and changing it in place changes no state.
A snapshot is one Arrow IPC file, one record batch per state with columns ``user_key, value``;
the handle records each state's mode and byte range.

Redistribution on restore (``restore_handles`` are indexed by old subtask):
  list       same parallelism: the subtask's own elements; otherwise the elements of all old
             subtasks in subtask order, split round-robin (element j goes to subtask j mod p)
  union      every element of every old subtask
  broadcast  the map of the first old subtask that has it (they are identical)
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa

from statekit.backends.common.snapshot_sink import HashingSink
from statekit.backends.common.copies import detached, detached_list
from statekit.backends.common.registration import checked_list_elements, serializers_differ
from statekit.serializers import resolve
from statekit.spi.backend import OperatorBackendParams, OperatorStateBackend, PendingSnapshot
from statekit.spi.errors import (
    ConfigurationError, CorruptStateError, RestoreError, SerializationError, StateAccessError,
)
from statekit.spi.handles import ByteRange, OperatorStateHandle, OperatorStateMode, verify_checksum
from statekit.spi.serializer import SerializerSnapshot, TypeSerializer, check_compatibility
from statekit.spi.state import BroadcastState, ListState
from statekit.spi.storage import CheckpointStreams

SCHEMA = pa.schema([pa.field("user_key", pa.binary()), pa.field("value", pa.binary(), nullable=False)])


class _OperatorList(ListState):
    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements

    def set_current_namespace(self, namespace: Any) -> None:
        raise StateAccessError("operator state has no namespaces")

    def get(self) -> list[Any]:
        return detached_list(self.elements)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateAccessError("ListState.add(None): list state elements cannot be None")
        self.elements.append(detached(value))

    def add_all(self, values: Iterable[Any]) -> None:
        self.elements.extend(detached_list(checked_list_elements(values, adding=True)))

    def update(self, values: Iterable[Any] | None) -> None:
        self.elements[:] = detached_list(checked_list_elements(() if values is None else values))

    def clear(self) -> None:
        self.elements.clear()


class _Broadcast(BroadcastState):
    def __init__(self, entries: dict[Any, Any]) -> None:
        self.entries = entries

    def get(self, key: Any) -> Any:
        return detached(self.entries.get(key))

    def put(self, key: Any, value: Any) -> None:
        self.entries[key] = detached(value)

    def remove(self, key: Any) -> None:
        self.entries.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self.entries

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter([(key, detached(value)) for key, value in self.entries.items()])

    def clear(self) -> None:
        self.entries.clear()


class _Registered:
    def __init__(self, mode: str, serializers: dict[str, TypeSerializer], data: Any) -> None:
        self.mode = mode
        self.serializers = serializers
        self.data = data  # list for list modes, dict for broadcast
        self.registered = False


class DefaultOperatorStateBackend(OperatorStateBackend):
    def __init__(self, params: OperatorBackendParams) -> None:
        self.params = params
        self._states: dict[str, _Registered] = {}
        self._restored = any(h is not None for h in params.restore_handles)
        if self._restored:
            _restore(self._states, params)

    @property
    def is_restored(self) -> bool:
        return self._restored

    def get_list_state(self, name: str, serializer: TypeSerializer | None = None) -> ListState:
        return _OperatorList(self._register(name, OperatorStateMode.SPLIT_DISTRIBUTE, {"value": serializer}).data)

    def get_union_list_state(self, name: str, serializer: TypeSerializer | None = None) -> ListState:
        return _OperatorList(self._register(name, OperatorStateMode.UNION, {"value": serializer}).data)

    def get_broadcast_state(self, name: str, key_serializer: TypeSerializer | None = None,
                            value_serializer: TypeSerializer | None = None) -> BroadcastState:
        serializers = {"user_key": key_serializer, "value": value_serializer}
        return _Broadcast(self._register(name, OperatorStateMode.BROADCAST, serializers).data)

    def _register(self, name: str, mode: str, declared: dict[str, TypeSerializer | None]) -> _Registered:
        """A role left undeclared keeps the serializer a restored state was written with (its values
        were read by it on restore), else the default."""
        if not isinstance(name, str) or not name:  # checkpoints key states by name in JSON: 5 would come back "5"
            raise ConfigurationError(f"an operator state name must be a non-empty string, got {name!r}")
        state = self._states.get(name)
        serializers = {role: resolve(s if s is not None or state is None else state.serializers.get(role))
                       for role, s in declared.items()}
        if state is None:
            state = self._states[name] = _Registered(mode, serializers,
                                                     {} if mode == OperatorStateMode.BROADCAST else [])
        elif state.mode != mode:
            raise StateAccessError(f"operator state {name!r} is {state.mode} state and cannot be used as {mode}")
        elif state.registered:
            if serializers_differ(state.serializers, serializers):
                raise StateAccessError(
                    f"operator state {name!r} is already registered with other serializers ({state.serializers}), "
                    f"not {serializers}; register it once per name")
        else:
            for role, new in serializers.items():
                check_compatibility(name, role.replace("_", " "), new, state.serializers[role].snapshot())
        state.serializers = serializers
        state.registered = True
        return state

    def snapshot(self, checkpoint_id: int) -> PendingSnapshot:
        copies = {name: (s.mode, s.serializers,
                         dict(s.data) if s.mode == OperatorStateMode.BROADCAST else list(s.data))
                  for name, s in sorted(self._states.items())}
        return _OperatorPendingSnapshot(copies)


class _OperatorPendingSnapshot(PendingSnapshot):
    def __init__(self, copies: dict[str, tuple[str, dict[str, TypeSerializer], Any]]) -> None:
        self._copies = copies

    def write(self, streams: CheckpointStreams) -> OperatorStateHandle | None:
        if not self._copies:
            return None
        out = streams.create_output(name="operator")
        sink = HashingSink(out)
        try:
            writer = pa.ipc.new_file(sink, SCHEMA)
            writer.write_batch(pa.RecordBatch.from_pylist([], schema=SCHEMA))
            sink.cut()
            ranges: dict[str, tuple[str, ByteRange]] = {}
            for name, (mode, serializers, data) in self._copies.items():
                start = sink.tell()
                user_keys, values = _serialized(name, mode, serializers, data)
                writer.write_batch(pa.RecordBatch.from_arrays(
                    [pa.array(user_keys, pa.binary()), pa.array(values, pa.binary())], schema=SCHEMA))
                ranges[name] = (mode, ByteRange(start, sink.tell() - start, sink.cut()))
            writer.close()
            sink.finish()
            stream = out.close_and_get_handle()
        except BaseException:
            sink.abort()
            out.discard()
            raise
        serializer_json = {name: {role: s.snapshot().to_json() for role, s in serializers.items()}
                           for name, (_, serializers, _) in self._copies.items()}
        return OperatorStateHandle(stream, ranges, serializer_json)


def _serialized(name: str, mode: str, serializers: dict[str, TypeSerializer],
                data: Any) -> tuple[list[bytes | None], list[bytes]]:
    """The user key and value columns of one state; a value its serializer rejects fails the
    snapshot naming the state (operator state is serialized only when it is snapshotted)."""
    try:
        if mode == OperatorStateMode.BROADCAST:
            keys, values = serializers["user_key"], serializers["value"]
            return keys.serialize_many(data.keys()), values.serialize_many(data.values())
        return [None] * len(data), serializers["value"].serialize_many(data)
    except SerializationError as exc:
        raise SerializationError(f"operator state {name!r} ({mode} state) cannot be snapshotted: {exc}") from exc


def _restore(states: dict[str, _Registered], params: OperatorBackendParams) -> None:
    streams = params.restore_streams
    if streams is None:
        raise RestoreError("operator state handles were given without the streams to read them")
    old = list(params.restore_handles)
    same_parallelism = len(old) == params.subtask.parallelism
    me = params.subtask.subtask_index
    for old_index, handle in enumerate(old):
        if handle is None:
            continue
        data = _read_whole(streams, handle)
        for name, (mode, byte_range) in sorted(handle.states.items()):
            serializers = {role: SerializerSnapshot.from_json(snap).restore_serializer()
                           for role, snap in handle.serializers[name].items()}
            state = states.get(name)
            if state is None:
                state = states[name] = _Registered(mode, serializers,
                                                   {} if mode == OperatorStateMode.BROADCAST else [])
            if mode == OperatorStateMode.BROADCAST:
                if not state.data:
                    state.data.update(_read_entries(data, handle, name, byte_range, serializers))
            elif mode == OperatorStateMode.UNION or not same_parallelism or old_index == me:
                state.data.extend(v for _, v in _read_entries(data, handle, name, byte_range, serializers))
    if not same_parallelism:
        for state in states.values():
            if state.mode == OperatorStateMode.SPLIT_DISTRIBUTE:
                state.data[:] = state.data[me::params.subtask.parallelism]


def _file(handle: OperatorStateHandle) -> str:
    stored_as = handle.stream.stored_as
    return f"file {stored_as!r}" if stored_as else "inline bytes"


def _read_whole(streams: CheckpointStreams, handle: OperatorStateHandle) -> memoryview:
    """The handle's file, whole: operator state is small, and one read verified against the file's
    size and checksum covers every byte (its Arrow header and footer too), where the states' own
    checksums cover only their batches."""
    try:
        return memoryview(streams.read(handle.stream))
    except CorruptStateError as exc:
        raise CorruptStateError(f"operator states {sorted(handle.states)} in {_file(handle)}: {exc}") from exc


def _read_entries(whole: memoryview, handle: OperatorStateHandle, name: str, byte_range: ByteRange,
                  serializers: dict[str, TypeSerializer]) -> Iterator[tuple[Any, Any]]:
    data = whole[byte_range.offset:byte_range.end]
    verify_checksum(data, byte_range.checksum, f"operator state {name!r} in {_file(handle)}")
    try:
        batch = pa.ipc.read_record_batch(pa.ipc.read_message(pa.BufferReader(pa.py_buffer(data))), SCHEMA)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptStateError(f"operator state {name!r} in {_file(handle)} cannot be parsed: {exc}") from exc
    columns = batch.to_pydict()
    values = serializers["value"].deserialize_many(columns["value"])
    if "user_key" in serializers:
        return zip(serializers["user_key"].deserialize_many(columns["user_key"]), values)
    return zip(columns["user_key"], values)


