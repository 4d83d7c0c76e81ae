"""State time-to-live for every backend, as Flink does it (``TtlStateFactory``): a state with a
``StateTtlConfig`` is an ordinary state of the same kind whose entries are ``(timestamp_ms, value)``
pairs, wrapped in a state that checks, refreshes and cleans up the timestamps.

*Stored form.* ``TtlSerializer`` writes an entry as its timestamp (8 bytes, big-endian) followed
by the value's own bytes, for a value, each list element, each map value, and a reducing or
aggregating state's accumulator. The canonical format therefore carries the timestamps: they
survive savepoints, backend switches and rescaling with no format of their own, and
``timestamp_of`` reads one from stored bytes without deserializing the value (snapshot cleanup
and sweeps use it).

*Expiry.* An entry written at ``t`` expires at ``t + ttl``. A state's ``TtlClocks`` give both
times: with processing-time TTL, both are the backend's processing time
(``KeyedStateBackend.processing_time_ms``: the epoch's recorded time under the runtime); with
event-time TTL, an entry is written at the element's event time (never before the watermark:
``KeyedStateBackend.event_write_time_ms``) and expires when the watermark reaches ``t + ttl``.
An event-time write time is at most ``MAX_TIMESTAMP - ttl`` (``t + ttl`` stays a timestamp), so
the watermark of an ended input (``MAX_TIMESTAMP``) expires every entry, those written while the
last timers fire too. Reading an expired entry removes it and returns nothing (or, with
``RETURN_EXPIRED_IF_NOT_CLEANED_UP``, returns it once). ``ON_READ_AND_WRITE`` rewrites an entry
with the current time when it is read alive.

*TTL and its absence are not compatible.* A state checkpointed with TTL cannot be registered
without it, nor the reverse (Flink raises ``StateMigrationException``); a different TTL duration
is fine, since entries keep their write time, not their expiry. Nor can a state checkpointed with
TTL on one time be registered with TTL on the other: its write times are of the other clock.
"""
from __future__ import annotations

import copy
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from statekit.backends.common.registration import checked_list_elements
from statekit.serializers import declared_serializers, resolve
from statekit.spi.backend import KeyedStateBackend
from statekit.spi.descriptors import (
    AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, StateDescriptor, StateKind, StateTtlConfig, TtlStateVisibility, TtlTimeCharacteristic,
    TtlUpdateType, ValueStateDescriptor, ttl_ms,
)
from statekit.spi.errors import CorruptStateError
from statekit.spi.handles import StateMetaInfo
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer, compatibility
from statekit.spi.state import AggregatingState, ListState, MapState, ReducingState, State, ValueState
from statekit.spi.timers import MAX_TIMESTAMP, MIN_TIMESTAMP

TIMESTAMP = struct.Struct(">q")
Clock = Callable[[], int]


@dataclass(frozen=True)
class TtlClocks:
    """The two times of a TTL state: ``now``, against which an entry's write time + ttl is
    compared, and ``write``, the time a write gives its entry."""

    now: Clock
    write: Clock

    @classmethod
    def of(cls, config: StateTtlConfig, backend: KeyedStateBackend) -> "TtlClocks":
        """The clocks of a state with TTL ``config`` in ``backend``."""
        if not config.event_time:
            def processing_time() -> int:
                return backend.processing_time_ms
            return cls(processing_time, processing_time)
        latest = MAX_TIMESTAMP - config.ttl_ms

        def watermark() -> int:
            return backend.watermark_ms

        def event_time() -> int:
            written = backend.event_write_time_ms
            return written if written < latest else latest
        return cls(watermark, event_time)


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


def expiry_deadlines(states: Iterable[StateMetaInfo], processing_time_ms: int,
                     watermark_ms: int = MIN_TIMESTAMP) -> dict[str, int]:
    """For each state with TTL, the latest write time that is expired at ``processing_time_ms``
    (event-time TTL: at ``watermark_ms``): an entry written at or before it is expired. A state
    none of whose entries can be expired (event time before any watermark) is left out."""
    deadlines = {}
    for meta in states:
        if meta.ttl_seconds is not None:
            now = watermark_ms if meta.ttl_time is TtlTimeCharacteristic.EVENT_TIME else processing_time_ms
            deadline = now - ttl_ms(meta.ttl_seconds)
            if deadline >= MIN_TIMESTAMP:
                deadlines[meta.name] = deadline
    return deadlines


# ---------------------------------------------------------------------------- the inner state


class TtlReduceFunction:
    """The reduce function over ``(timestamp, value)``: an expired accumulator is dropped, and the
    result carries the time of the write."""

    def __init__(self, reduce: Callable[[Any, Any], Any], ttl_ms: int, clocks: TtlClocks) -> None:
        self.reduce, self.ttl_ms, self.clocks = reduce, ttl_ms, clocks

    def __call__(self, held: tuple[int, Any], added: tuple[int, Any]) -> tuple[int, Any]:
        written = self.clocks.write()
        if held[0] + self.ttl_ms <= self.clocks.now():
            return written, added[1]
        return written, self.reduce(held[1], added[1])


class _SetAccumulator:
    """Added to a TTL aggregating state: replaces its accumulator (a refresh on read)."""

    __slots__ = ("accumulator",)

    def __init__(self, accumulator: tuple[int, Any]) -> None:
        self.accumulator = accumulator


class TtlAggregateFunction(AggregateFunction[Any, tuple[int, Any], tuple[int, Any]]):
    """The aggregate function over ``(timestamp, accumulator)``. ``get_result`` returns the held
    accumulator itself: ``TtlAggregatingState`` checks it before computing the user's result."""

    def __init__(self, function: AggregateFunction, ttl_ms: int, clocks: TtlClocks) -> None:
        self.function, self.ttl_ms, self.clocks = function, ttl_ms, clocks

    def create_accumulator(self) -> tuple[int, Any]:
        return self.clocks.write(), self.function.create_accumulator()

    def add(self, value: Any, accumulator: tuple[int, Any]) -> tuple[int, Any]:
        if isinstance(value, _SetAccumulator):
            return value.accumulator
        alive = accumulator[0] + self.ttl_ms > self.clocks.now()
        held = accumulator[1] if alive else self.function.create_accumulator()
        return self.clocks.write(), self.function.add(value, held)

    def get_result(self, accumulator: tuple[int, Any]) -> tuple[int, Any]:
        return accumulator

    def merge(self, a: tuple[int, Any], b: tuple[int, Any]) -> tuple[int, Any]:
        return max(a[0], b[0]), self.function.merge(a[1], b[1])


def inner_descriptor(descriptor: StateDescriptor, clocks: TtlClocks) -> StateDescriptor:
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
        return ReducingStateDescriptor(descriptor.name, TtlReduceFunction(descriptor.reduce_function, ttl_ms, clocks),
                                       values, ttl=config)
    if isinstance(descriptor, AggregatingStateDescriptor):
        return AggregatingStateDescriptor(
            descriptor.name, TtlAggregateFunction(descriptor.aggregate_function, ttl_ms, clocks),
            values, ttl=config)
    raise TypeError(f"no TTL form for {type(descriptor).__name__}")


def ttl_state(descriptor: StateDescriptor, create: Callable[[StateDescriptor], State],
              time: KeyedStateBackend | Clock) -> State:
    """The state of a descriptor with TTL: ``create`` (the backend's own ``get_state``) makes the
    inner state of ``inner_descriptor``, which the returned state wraps. ``time``: the backend
    whose times the state uses (``TtlClocks.of``), or, as plugins passed it before event-time TTL,
    a function that gives the processing time (processing-time TTL only)."""
    config = descriptor.ttl
    assert config is not None
    backend = time if isinstance(time, KeyedStateBackend) else None
    clocks = TtlClocks.of(config, backend) if backend is not None else TtlClocks(time, time)  # type: ignore[arg-type]
    inner = create(inner_descriptor(descriptor, clocks))
    kind = descriptor.kind
    state: _TtlState
    if kind is StateKind.VALUE:
        state = TtlValueState(inner, config, clocks, getattr(descriptor, "default", None))
    elif kind is StateKind.LIST:
        state = TtlListState(inner, config, clocks)
    elif kind is StateKind.MAP:
        state = TtlMapState(inner, config, clocks)
    elif kind is StateKind.REDUCING:
        state = TtlReducingState(inner, config, clocks)
    else:
        state = TtlAggregatingState(inner, config, clocks, descriptor.aggregate_function)  # type: ignore[attr-defined]
    state.backend = backend
    return state  # type: ignore[return-value]


# ---------------------------------------------------------------------------- the states users see


class _TtlState:
    #: where entries that a read found expired and removed are counted (``KeyedStateBackend.ttl_removed_on_read``)
    backend: KeyedStateBackend | None = None

    def __init__(self, inner: Any, config: StateTtlConfig, clocks: TtlClocks) -> None:
        self.inner = inner
        self.ttl_ms = config.ttl_ms
        self.now, self.written = clocks.now, clocks.write
        self.refresh_on_read = config.update_type is TtlUpdateType.ON_READ_AND_WRITE
        self.return_expired = config.visibility is TtlStateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP

    def clear(self) -> None:
        self.inner.clear()

    def set_current_namespace(self, namespace: Any) -> None:
        self.inner.set_current_namespace(namespace)

    def _alive(self, timestamp: int, now: int) -> bool:
        return timestamp + self.ttl_ms > now

    def _removed(self, entries: int) -> None:
        """A read removed ``entries`` expired entries (Flink's cleanup on read)."""
        if self.backend is not None:
            self.backend.ttl_removed_on_read += entries


class TtlValueState(_TtlState, ValueState):
    def __init__(self, inner: ValueState, config: StateTtlConfig, clocks: TtlClocks, default: Any) -> None:
        super().__init__(inner, config, clocks)
        self.default = default

    def value(self) -> Any:
        held = self.inner.value()
        if held is None:
            return copy.deepcopy(self.default)  # a fresh copy each time, as the backends give it
        timestamp, value = held
        now = self.now()
        if not self._alive(timestamp, now):
            self.inner.clear()
            self._removed(1)
            return value if self.return_expired else copy.deepcopy(self.default)
        if self.refresh_on_read:
            self.inner.update((self.written(), value))
        return value

    def update(self, value: Any) -> None:
        if value is None:
            self.inner.clear()
        else:
            self.inner.update((self.written(), value))


class TtlListState(_TtlState, ListState):
    def get(self) -> list[Any]:
        held = self.inner.get()
        if not held:
            return []
        now = self.now()
        alive = [entry for entry in held if self._alive(entry[0], now)]
        if self.refresh_on_read and alive:
            written = self.written()
            self.inner.update([(written, value) for _, value in alive])
        elif len(alive) != len(held):
            self.inner.update(alive)
        if len(alive) != len(held):  # removed by either update
            self._removed(len(held) - len(alive))
        return [value for _, value in (held if self.return_expired else alive)]

    def add(self, value: Any) -> None:
        self.add_all([value])

    def add_all(self, values: Iterable[Any]) -> None:
        elements = checked_list_elements(values, adding=True)
        if elements:
            written = self.written()
            self.inner.add_all([(written, value) for value in elements])

    def update(self, values: Iterable[Any] | None) -> None:
        elements = checked_list_elements(values)
        written = self.written()
        self.inner.update([(written, value) for value in elements])


class TtlMapState(_TtlState, MapState):
    def get(self, user_key: Any) -> Any:
        held = self.inner.get(user_key)
        return None if held is None else self._checked(user_key, held, self.now())[1]

    def put(self, user_key: Any, value: Any) -> None:
        self.inner.put(user_key, (self.written(), value))

    def put_all(self, entries: Mapping[Any, Any]) -> None:
        written = self.written()
        self.inner.put_all({key: (written, value) for key, value in entries.items()})

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
            self._removed(1)
            return (True, value) if self.return_expired else (False, None)
        if self.refresh_on_read:
            self.inner.put(user_key, (self.written(), value))
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
            self._removed(1)
            return held if self.return_expired else None
        if self.refresh_on_read:
            self._rewrite((self.written(), held[1]))
        return held

    def _rewrite(self, held: tuple[int, Any]) -> None:
        raise NotImplementedError


class TtlReducingState(_TtlAppending, ReducingState):
    def get(self) -> Any:
        held = self._held()
        return None if held is None else held[1]

    def add(self, value: Any) -> None:
        self.inner.add((self.written(), value))

    def _rewrite(self, held: tuple[int, Any]) -> None:
        self.inner.clear()
        self.inner.add(held)  # the first value of an empty reducing state is held as it is


class TtlAggregatingState(_TtlAppending, AggregatingState):
    def __init__(self, inner: AggregatingState, config: StateTtlConfig, clocks: TtlClocks,
                 function: AggregateFunction) -> None:
        super().__init__(inner, config, clocks)
        self.function = function

    def get(self) -> Any:
        held = self._held()
        return None if held is None else self.function.get_result(held[1])

    def add(self, value: Any) -> None:
        self.inner.add(value)

    def _rewrite(self, held: tuple[int, Any]) -> None:
        self.inner.clear()
        self.inner.add(_SetAccumulator(held))
