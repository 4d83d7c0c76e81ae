"""State descriptors: the name, kind, serializers, default and TTL of a state.

A state's values are written by the serializer its descriptor names, else by the schema'd one of
the type it declares (keyword ``type=``; a map state's ``key_type=`` and ``value_type=``: ``int``,
``float``, ``str``, ``bytes``, a dataclass, a ``StructType`` or a DDL string), else by the default,
msgpack (``statekit.serializers``), or, restored, by the serializer that wrote them. Descriptors
are plain, picklable data.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar

from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")
K = TypeVar("K")
V = TypeVar("V")


class StateKind(str, enum.Enum):
    VALUE = "value"
    LIST = "list"
    MAP = "map"
    REDUCING = "reducing"
    AGGREGATING = "aggregating"
    #: the timers of one timer service in one time domain (Flink's priority-queue state): a set of
    #: (key, namespace, timestamp), ordered by timestamp (``spi.timers``)
    TIMERS = "timers"


#: the names of timer states start with this; no other state may use it
TIMER_STATE_PREFIX = "_timers/"


class TtlUpdateType(str, enum.Enum):
    """When an entry's time-to-live starts again (Flink's ``StateTtlConfig.UpdateType``)."""

    ON_CREATE_AND_WRITE = "on-create-and-write"  # written (update, add, put)
    ON_READ_AND_WRITE = "on-read-and-write"  # written, or read while still alive


class TtlStateVisibility(str, enum.Enum):
    """Whether an expired entry that was not cleaned up yet may still be read."""

    NEVER_RETURN_EXPIRED = "never-return-expired"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "return-expired-if-not-cleaned-up"


class TtlTimeCharacteristic(str, enum.Enum):
    """The time an entry's time-to-live runs on.

    ``PROCESSING_TIME``: written at the epoch's processing time, expired when the processing time
    reaches write time + ttl (Flink's only kind). ``EVENT_TIME``: written at the event time of the
    row being processed (never before the watermark; in ``on_timer``: the watermark), expired
    when the watermark reaches write time + ttl, as Spark's ``dropDuplicatesWithinWatermark``
    keeps state: no wall clock is involved, so a replay or a backfill expires the same entries."""

    PROCESSING_TIME = "processing-time"
    EVENT_TIME = "event-time"


@dataclass(frozen=True)
class StateTtlConfig:
    """Time-to-live of a state's entries (a value; each list element; each map entry; a
    reducing or aggregating state's accumulator), in processing time (under Spark the epoch's
    recorded processing time, identical when a micro-batch is replayed) or, with
    ``time_characteristic=TtlTimeCharacteristic.EVENT_TIME``, in event time (measured by the
    watermark). Honoured by backends that declare the ``ttl`` capability (and, for event time,
    ``event_time_ttl``). An expired entry is never returned (by default), is removed when it is
    accessed, is left out of full snapshots and savepoints, and is swept from the backend after
    each epoch (within ``spark.statekit.ttl.sweep-seconds``)."""

    ttl_seconds: float
    update_type: TtlUpdateType = TtlUpdateType.ON_CREATE_AND_WRITE
    visibility: TtlStateVisibility = TtlStateVisibility.NEVER_RETURN_EXPIRED
    time_characteristic: TtlTimeCharacteristic = TtlTimeCharacteristic.PROCESSING_TIME

    def __post_init__(self) -> None:
        if isinstance(self.ttl_seconds, bool) or not isinstance(self.ttl_seconds, (int, float)) \
                or not 0 < self.ttl_seconds < float("inf"):
            raise ConfigurationError(f"TTL must be a positive, finite number of seconds, got {self.ttl_seconds!r}")
        if not isinstance(self.update_type, TtlUpdateType):
            raise ConfigurationError(f"update_type must be a TtlUpdateType, got {self.update_type!r}")
        if not isinstance(self.visibility, TtlStateVisibility):
            raise ConfigurationError(f"visibility must be a TtlStateVisibility, got {self.visibility!r}")
        if not isinstance(self.time_characteristic, TtlTimeCharacteristic):
            raise ConfigurationError(
                f"time_characteristic must be a TtlTimeCharacteristic, got {self.time_characteristic!r}; pass "
                f"TtlTimeCharacteristic.PROCESSING_TIME (the default) or TtlTimeCharacteristic.EVENT_TIME "
                f"(from statekit import TtlTimeCharacteristic)")

    @property
    def ttl_ms(self) -> int:
        return ttl_ms(self.ttl_seconds)

    @property
    def event_time(self) -> bool:
        return self.time_characteristic is TtlTimeCharacteristic.EVENT_TIME


def ttl_ms(ttl_seconds: float) -> int:
    """A TTL in whole milliseconds, at least one."""
    return max(1, round(ttl_seconds * 1000))


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """Incremental aggregation for ``AggregatingState`` (Flink's ``AggregateFunction``)."""

    @abstractmethod
    def create_accumulator(self) -> ACC: ...

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC: ...

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT: ...

    def merge(self, a: ACC, b: ACC) -> ACC:
        raise NotImplementedError(f"{type(self).__name__} does not support merging accumulators")


@dataclass(frozen=True)
class StateDescriptor:
    name: str
    ttl: StateTtlConfig | None = field(default=None, kw_only=True)

    kind = StateKind.VALUE  # overridden per subclass

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"a state name must be a non-empty string, got {self.name!r}")
        if self.name.startswith(TIMER_STATE_PREFIX) and self.kind is not StateKind.TIMERS:
            raise ConfigurationError(f"state names starting with {TIMER_STATE_PREFIX!r} are kept for timers; "
                                     f"rename state {self.name!r}")

    def serializers(self) -> dict[str, TypeSerializer | None]:
        """The serializers by role ("value", "user_key"), as declared (None = default)."""
        return {"value": getattr(self, "serializer", None)}

    def declared_types(self) -> dict[str, Any]:
        """The types declared by role, for the roles without a serializer (``statekit.serializers.
        declared_serializers`` turns them into serializers)."""
        return {"value": getattr(self, "type", None)}

    def _check_declared(self) -> None:
        for role, declared in self.declared_types().items():
            if declared is not None and self.serializers().get(role) is not None:
                raise ConfigurationError(
                    f"state {self.name!r} declares both a {role.replace('_', ' ')} serializer and a type: the "
                    f"serializer decides the format, so pass one of the two")


@dataclass(frozen=True)
class ValueStateDescriptor(StateDescriptor, Generic[V]):
    serializer: TypeSerializer[V] | None = None
    default: V | None = None
    type: Any = field(default=None, kw_only=True)
    kind = StateKind.VALUE

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_declared()


@dataclass(frozen=True)
class ListStateDescriptor(StateDescriptor, Generic[V]):
    serializer: TypeSerializer[V] | None = None  # of one element
    type: Any = field(default=None, kw_only=True)  # of one element
    kind = StateKind.LIST

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_declared()


@dataclass(frozen=True)
class MapStateDescriptor(StateDescriptor, Generic[K, V]):
    key_serializer: TypeSerializer[K] | None = None
    value_serializer: TypeSerializer[V] | None = None
    key_type: Any = field(default=None, kw_only=True)
    value_type: Any = field(default=None, kw_only=True)
    kind = StateKind.MAP

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_declared()

    def serializers(self) -> dict[str, TypeSerializer | None]:
        return {"user_key": self.key_serializer, "value": self.value_serializer}

    def declared_types(self) -> dict[str, Any]:
        return {"user_key": self.key_type, "value": self.value_type}


@dataclass(frozen=True)
class ReducingStateDescriptor(StateDescriptor, Generic[V]):
    reduce_function: Callable[[V, V], V] = None  # type: ignore[assignment]
    serializer: TypeSerializer[V] | None = None
    type: Any = field(default=None, kw_only=True)
    kind = StateKind.REDUCING

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_declared()
        if not callable(self.reduce_function):
            raise ConfigurationError(f"reducing state {self.name!r} needs a reduce_function(a, b)")


@dataclass(frozen=True)
class AggregatingStateDescriptor(StateDescriptor, Generic[IN, ACC, OUT]):
    aggregate_function: AggregateFunction[IN, ACC, OUT] = None  # type: ignore[assignment]
    serializer: TypeSerializer[ACC] | None = None  # of the accumulator
    type: Any = field(default=None, kw_only=True)  # of the accumulator
    kind = StateKind.AGGREGATING

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_declared()
        if not isinstance(self.aggregate_function, AggregateFunction):
            raise ConfigurationError(
                f"aggregating state {self.name!r} needs an AggregateFunction instance")


@dataclass(frozen=True)
class TimerStateDescriptor(StateDescriptor):
    """The state that holds a timer service's timers of one time domain (``KeyedStateBackend.
    create_timer_queue`` registers it; functions use ``ctx.timer_service()``). Only a namespace
    serializer: a timer is (key, namespace, timestamp) and carries no value."""

    kind = StateKind.TIMERS

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.name.startswith(TIMER_STATE_PREFIX):
            raise ConfigurationError(f"timer state names start with {TIMER_STATE_PREFIX!r}, got {self.name!r}")
        if self.ttl is not None:
            raise ConfigurationError(f"timer state {self.name!r} cannot have a TTL: timers are removed when they fire")

    def serializers(self) -> dict[str, TypeSerializer | None]:
        return {}

    def declared_types(self) -> dict[str, Any]:
        return {}
