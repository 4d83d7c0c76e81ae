"""``TimeWindow``: the half-open interval ``[start, end)`` of epoch milliseconds a window covers,
and its serializer (the namespace of a window's state and timers)."""
from __future__ import annotations

import datetime
import struct
from typing import NamedTuple

from statekit.runtime.event_time import TIMESTAMP_TYPES, timestamp_of_ms
from statekit.spi.errors import SerializationError
from statekit.spi.serializer import TypeSerializer

_TWO_LONGS = struct.Struct(">qq")


class TimeWindow(NamedTuple):
    """A tuple, so that hashing and comparing one (the namespace of its state and timers, looked up
    for every element) is the tuple's own C code: a dataclass's is Python, several times slower."""

    start: int
    end: int

    @property
    def max_timestamp(self) -> int:
        """The last millisecond in the window: when its event-time timer fires."""
        return self.end - 1

    def intersects(self, other: "TimeWindow") -> bool:
        """Overlapping or adjacent (Flink's rule for merging session windows)."""
        return self.start <= other.end and other.start <= self.end

    def cover(self, other: "TimeWindow") -> "TimeWindow":
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    def bounds(self, time_type: str | None) -> "tuple[int, int] | tuple[datetime.datetime, datetime.datetime]":
        """(start, end) in the type of the job's event time, ``ctx.time.event_time_type``: epoch
        milliseconds, or datetimes for a ``timestamp`` (aware, UTC) or ``timestamp_ntz`` (naive)
        event time, as Spark's ``window()`` gives them."""
        if time_type in TIMESTAMP_TYPES:
            return timestamp_of_ms(self.start, time_type), timestamp_of_ms(self.end, time_type)  # type: ignore[arg-type]
        return self.start, self.end


class TimeWindowSerializer(TypeSerializer[TimeWindow]):
    """16 bytes: start and end as big-endian signed 64-bit integers."""

    FIXED_SIZE = 16
    BYTE_EQUALITY_TYPES = frozenset({TimeWindow})

    def serialize(self, value: TimeWindow) -> bytes:
        try:
            return _TWO_LONGS.pack(value.start, value.end)
        except (struct.error, AttributeError) as exc:
            raise SerializationError(f"TimeWindowSerializer cannot serialize {value!r}: {exc}") from exc

    def deserialize(self, data: bytes) -> TimeWindow:
        if len(data) != _TWO_LONGS.size:
            raise SerializationError(f"TimeWindowSerializer expects {_TWO_LONGS.size} bytes, got {len(data)}")
        return TimeWindow(*_TWO_LONGS.unpack(data))
