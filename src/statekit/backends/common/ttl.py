"""State time-to-live for every backend, as Flink does it (``TtlStateFactory``): a state with a
``StateTtlConfig`` is an ordinary state of the same kind whose entries are ``(timestamp_ms, value)``
pairs, wrapped in a state that checks, refreshes and cleans up the timestamps.

*Stored form.* ``TtlSerializer`` writes an entry as its timestamp (8 bytes, big-endian) followed
by the value's own bytes, for a value, each list element, each map value, and a reducing or
aggregating state's accumulator. The canonical format therefore carries the timestamps: they
survive savepoints, backend switches and rescaling with no format of their own, and
``timestamp_of`` reads one from stored bytes without deserializing the value (snapshot cleanup
and sweeps use it).

*Expiry.* An entry written at ``t`` expires at ``t + ttl``, measured against the backend's
processing time (``KeyedStateBackend.processing_time_ms``: the epoch's recorded time under the
runtime). Reading an expired entry removes it and returns nothing (or, with
``RETURN_EXPIRED_IF_NOT_CLEANED_UP``, returns it once). ``ON_READ_AND_WRITE`` rewrites an entry
with the current time when it is read alive.

*TTL and its absence are not compatible.* A state checkpointed with TTL cannot be registered
without it, nor the reverse (Flink raises ``StateMigrationException``); a different TTL duration
is fine, since entries keep their write time, not their expiry.
"""
from __future__ import annotations

import copy
import struct
from typing import Any, Callable, Iterable, Iterator, Mapping

from statekit.backends.common.registration import checked_list_elements
from statekit.serializers import declared_serializers, resolve
from statekit.spi.descriptors import (
    AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, StateDescriptor, StateKind, StateTtlConfig, TtlStateVisibility, TtlUpdateType,
    ValueStateDescriptor,
)
from statekit.spi.errors import CorruptStateError
from statekit.spi.handles import StateMetaInfo
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer, compatibility
from statekit.spi.state import AggregatingState, ListState, MapState, ReducingState, State, ValueState

TIMESTAMP = struct.Struct(">q")
Clock = Callable[[], int]


# ---------------------------------------------------------------------------- stored form


class TtlSerializer(TypeSerializer[tuple[int, Any]]):
    """``(timestamp_ms, value)`` as the timestamp's 8 bytes, then ``inner``'s bytes of the value."""

    def __init__(self, inner: TypeSerializer) -> None:
        self.inner = inner

    def serialize(self, value: tuple[int, Any]) -> bytes:
        timestamp, held = value
        return TIMESTAMP.pack(timestamp) + self.inner.serialize(held)

    def deserialize(self, data: bytes) -> tuple[int, Any]:
        if len(data) < TIMESTAMP.size:
            raise CorruptStateError(f"a TTL entry of {len(data)} bytes has no timestamp (8 bytes)")
        return TIMESTAMP.unpack_from(data)[0], self.inner.deserialize(data[TIMESTAMP.size:])

    def decodes_like(self, other: TypeSerializer) -> bool:
        return isinstance(other, TtlSerializer) and self.inner.decodes_like(other.inner)

    def incompatibility(self, previous: SerializerSnapshot) -> str | None:
        if previous.identity != self.snapshot().identity or "inner" not in previous.config:
            return None
        return self.inner.incompatibility(SerializerSnapshot.from_json(previous.config["inner"]))

    def config(self) -> dict[str, Any]:
        return {"inner": self.inner.snapshot().to_json()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "TtlSerializer":
        return cls(SerializerSnapshot.from_json(config["inner"]).restore_serializer())

    def resolve_compatibility(self, previous: SerializerSnapshot) -> Compatibility:
        if previous.identity != self.snapshot().identity or "inner" not in previous.config:
            return Compatibility.INCOMPATIBLE
        return compatibility(self.inner, SerializerSnapshot.from_json(previous.config["inner"]))


def timestamp_of(data: bytes) -> int:
    """The write time of a stored TTL entry (``TtlSerializer`` bytes)."""
    return TIMESTAMP.unpack_from(data)[0]


def expiry_deadlines(states: Iterable[StateMetaInfo], now_ms: int) -> dict[str, int]:
    """For each state with TTL, the latest write time that is expired at ``now_ms``: an entry
    written at or before it is expired."""
    return {meta.name: now_ms - max(1, round(meta.ttl_seconds * 1000))
            for meta in states if meta.ttl_seconds is not None}


# ---------------------------------------------------------------------------- the inner state


class TtlReduceFunction:
    """The reduce function over ``(timestamp, value)``: an expired accumulator is dropped, and the
    result carries the time of the write."""

    def __init__(self, reduce: Callable[[Any, Any], Any], ttl_ms: int, now: Clock) -> None:
        self.reduce, self.ttl_ms, self.now = reduce, ttl_ms, now

    def __call__(self, held: tuple[int, Any], added: tuple[int, Any]) -> tuple[int, Any]:
        now = self.now()
        if held[0] + self.ttl_ms <= now:
            return now, added[1]
        return now, self.reduce(held[1], added[1])


class _SetAccumulator:
    """Added to a TTL aggregating state: replaces its accumulator (a refresh on read)."""

    __slots__ = ("accumulator",)

    def __init__(self, accumulator: tuple[int, Any]) -> None:
        self.accumulator = accumulator


class TtlAggregateFunction(AggregateFunction[Any, tuple[int, Any], tuple[int, Any]]):
    """The aggregate function over ``(timestamp, accumulator)``. ``get_result`` returns the held
    accumulator itself: ``TtlAggregatingState`` checks it before computing the user's result."""

    def __init__(self, function: AggregateFunction, ttl_ms: int, now: Clock) -> None:
        self.function, self.ttl_ms, self.now = function, ttl_ms, now

    def create_accumulator(self) -> tuple[int, Any]:
        return self.now(), self.function.create_accumulator()

    def add(self, value: Any, accumulator: tuple[int, Any]) -> tuple[int, Any]:
        if isinstance(value, _SetAccumulator):
            return value.accumulator
        now = self.now()
        held = accumulator[1] if accumulator[0] + self.ttl_ms > now else self.function.create_accumulator()
        return now, self.function.add(value, held)

    def get_result(self, accumulator: tuple[int, Any]) -> tuple[int, Any]:
        return accumulator

    def merge(self, a: tuple[int, Any], b: tuple[int, Any]) -> tuple[int, Any]:
        return max(a[0], b[0]), self.function.merge(a[1], b[1])


def inner_descriptor(descriptor: StateDescriptor, now: Clock) -> StateDescriptor:
    """The descriptor of the state that holds ``descriptor``'s entries with their timestamps."""
    config = descriptor.ttl
    assert config is not None
    ttl_ms = config.ttl_ms
    declared = declared_serializers(descriptor)
    values = TtlSerializer(resolve(declared["value"]))
    if isinstance(descriptor, ValueStateDescriptor):
        return ValueStateDescriptor(descriptor.name, values, ttl=config)
    if isinstance(descriptor, ListStateDescriptor):
        return ListStateDescriptor(descriptor.name, values, ttl=config)
    if isinstance(descriptor, MapStateDescriptor):
        return MapStateDescriptor(descriptor.name, declared["user_key"], values, ttl=config)
    if isinstance(descriptor, ReducingStateDescriptor):
        return ReducingStateDescriptor(descriptor.name, TtlReduceFunction(descriptor.reduce_function, ttl_ms, now),
                                       values, ttl=config)
    if isinstance(descriptor, AggregatingStateDescriptor):
        return AggregatingStateDescriptor(
            descriptor.name, TtlAggregateFunction(descriptor.aggregate_function, ttl_ms, now),
            values, ttl=config)
    raise TypeError(f"no TTL form for {type(descriptor).__name__}")


def ttl_state(descriptor: StateDescriptor, create: Callable[[StateDescriptor], State], now: Clock) -> State:
    """The state of a descriptor with TTL: ``create`` (the backend's own ``get_state``) makes the
    inner state of ``inner_descriptor``, which the returned state wraps."""
    inner = create(inner_descriptor(descriptor, now))
    config = descriptor.ttl
    assert config is not None
    kind = descriptor.kind
    if kind is StateKind.VALUE:
        return TtlValueState(inner, config, now, getattr(descriptor, "default", None))
    if kind is StateKind.LIST:
        return TtlListState(inner, config, now)
    if kind is StateKind.MAP:
        return TtlMapState(inner, config, now)
    if kind is StateKind.REDUCING:
        return TtlReducingState(inner, config, now)
    return TtlAggregatingState(inner, config, now, descriptor.aggregate_function)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- the states users see


class _TtlState:
    def __init__(self, inner: Any, config: StateTtlConfig, now: Clock) -> None:
        self.inner = inner
        self.ttl_ms = config.ttl_ms
        self.now = now
        self.refresh_on_read = config.update_type is TtlUpdateType.ON_READ_AND_WRITE
        self.return_expired = config.visibility is TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP

    def clear(self) -> None:
        self.inner.clear()

    def set_current_namespace(self, namespace: Any) -> None:
        self.inner.set_current_namespace(namespace)

    def _alive(self, timestamp: int, now: int) -> bool:
        return timestamp + self.ttl_ms > now


class TtlValueState(_TtlState, ValueState):
    def __init__(self, inner: ValueState, config: StateTtlConfig, now: Clock, default: Any) -> None:
        super().__init__(inner, config, now)
        self.default = default

    def value(self) -> Any:
        held = self.inner.value()
        if held is None:
            return copy.deepcopy(self.default)  # a fresh copy each time, as the backends give it
        timestamp, value = held
        now = self.now()
        if not self._alive(timestamp, now):
            self.inner.clear()
            return value if self.return_expired else copy.deepcopy(self.default)
        if self.refresh_on_read:
            self.inner.update((now, value))
        return value

    def update(self, value: Any) -> None:
        if value is None:
            self.inner.clear()
        else:
            self.inner.update((self.now(), value))


class TtlListState(_TtlState, ListState):
    def get(self) -> list[Any]:
        held = self.inner.get()
        if not held:
            return []
        now = self.now()
        alive = [entry for entry in held if self._alive(entry[0], now)]
        if self.refresh_on_read and alive:
            self.inner.update([(now, value) for _, value in alive])
        elif len(alive) != len(held):
            self.inner.update(alive)
        return [value for _, value in (held if self.return_expired else alive)]

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        elements = checked_list_elements(values, adding=True)
        if elements:
            now = self.now()
            self.inner.add_all([(now, value) for value in elements])

    def update(self, values: Iterable[Any] | None) -> None:
        elements = checked_list_elements(values)
        now = self.now()
        self.inner.update([(now, value) for value in elements])


class TtlMapState(_TtlState, MapState):
    def get(self, user_key: Any) -> Any:
        held = self.inner.get(user_key)
        return None if held is None else self._checked(user_key, held, self.now())[1]

    def put(self, user_key: Any, value: Any) -> None:
        self.inner.put(user_key, (self.now(), value))

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        now = self.now()
        self.inner.put_all({key: (now, value) for key, value in entries.items()})

    def remove(self, user_key: Any) -> None:
        self.inner.remove(user_key)

    def contains(self, user_key: Any) -> bool:
        held = self.inner.get(user_key)
        return held is not None and self._checked(user_key, held, self.now())[0]

    def items(self) -> Iterator[tuple[Any, Any]]:
        now = self.now()
        for user_key, held in self.inner.items():
            visible, value = self._checked(user_key, held, now)
            if visible:
                yield user_key, value

    def _checked(self, user_key: Any, held: tuple[int, Any], now: int) -> tuple[bool, Any]:
        """Whether the entry is visible, and its value (None when not): an expired entry is removed."""
        timestamp, value = held
        if not self._alive(timestamp, now):
            self.inner.remove(user_key)
            return (True, value) if self.return_expired else (False, None)
        if self.refresh_on_read:
            self.inner.put(user_key, (now, value))
        return True, value


class _TtlAppending(_TtlState):
    """Reducing and aggregating: one held ``(timestamp, accumulator)``."""

    def _held(self) -> tuple[int, Any] | None:
        """The held accumulator if visible (expired: removed; returned only when visible)."""
        held = self.inner.get()
        if held is None:
            return None
        now = self.now()
        if not self._alive(held[0], now):
            self.inner.clear()
            return held if self.return_expired else None
        if self.refresh_on_read:
            self._rewrite((now, held[1]))
        return held

    def _rewrite(self, held: tuple[int, Any]) -> None:
        raise NotImplementedError


class TtlReducingState(_TtlAppending, ReducingState):
    def get(self) -> Any:
        held = self._held()
        return None if held is None else held[1]

    def add(self, value: Any) -> None:
        self.inner.add((self.now(), value))

    def _rewrite(self, held: tuple[int, Any]) -> None:
        self.inner.clear()
        self.inner.add(held)  # the first value of an empty reducing state is held as it is


class TtlAggregatingState(_TtlAppending, AggregatingState):
    def __init__(self, inner: AggregatingState, config: StateTtlConfig, now: Clock,
                 function: AggregateFunction) -> None:
        super().__init__(inner, config, now)
        self.function = function

    def get(self) -> Any:
        held = self._held()
        return None if held is None else self.function.get_result(held[1])

    def add(self, value: Any) -> None:
        self.inner.add(value)

    def _rewrite(self, held: tuple[int, Any]) -> None:
        self.inner.clear()
        self.inner.add(_SetAccumulator(held))
