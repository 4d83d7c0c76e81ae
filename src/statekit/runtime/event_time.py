"""Event time and watermarks per epoch, as Spark derives them, recorded so that replays repeat them.

The watermark of epoch N is ``max(watermark of N-1, max event time seen by epochs < N - delay)``
(Spark's rule for ``withWatermark``, the "max" policy). Both numbers are recorded in epoch N's
checkpoint (``WATERMARK``, ``MAX_EVENT_TIME``): epoch N+1 starts from them, and a replay of epoch N,
which restores the checkpoint of N-1, computes the same watermark and so fires the same timers.

Rows whose event time is at or before the epoch's watermark are *late* (``is_late``): dropped and
counted (``LATE_ROWS`` in the checkpoint), as Spark's stateful operators drop them, unless the job
asks to process them or to give them back as a side output (``LATE_ROWS_OUTPUT`` counts those). A
function that ``judges_lateness`` itself (event-time windows) gets every row instead and reports
the ones it finds late: for a window, a row is late when every window it belongs to is past its
cleanup time (its end plus the allowed lateness), not when its own timestamp is below the
watermark (Flink's rule). A watermark ``w`` says that no more rows of time ``w`` or earlier are
expected (Flink's rule, and Spark's ``eventTime <= watermark``): the event-time timers and windows
ending at ``w`` fire in the epoch, so a row at ``w`` would come too late for them.
"""
from __future__ import annotations

import datetime
import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from statekit.spi.errors import ConfigurationError
from statekit.spi.timers import MAX_TIMESTAMP, MIN_TIMESTAMP

if TYPE_CHECKING:
    import pyarrow as pa

#: checkpoint properties: the epoch's watermark, the largest event time of this and earlier epochs,
#: how many late rows this epoch dropped, and how many it gave back as its side output
WATERMARK = "watermark_ms"
MAX_EVENT_TIME = "max_event_time_ms"
LATE_ROWS = "late_rows_dropped"
LATE_ROWS_OUTPUT = "late_rows_side_output"
#: a job of two inputs: the largest event time of each input so far, in input order
INPUT_EVENT_TIMES = "input_event_times_ms"

_UNITS_MS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000, "second": 1000,
             "seconds": 1000, "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
             "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000,
             "days": 86_400_000}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([a-z]+)\s*$")


def duration_ms(value: Any, setting: str, signed: bool = False) -> int:
    """A duration as milliseconds: a ``timedelta`` or text like ``"10 minutes"``, ``"30 s"``, ``"1 hour"``;
    negative (``"-15 minutes"``) only where ``signed``."""
    if isinstance(value, datetime.timedelta):
        ms = value / datetime.timedelta(milliseconds=1)
    else:
        match = _DURATION.match(value.lower()) if isinstance(value, str) else None
        if match is None or match.group(2) not in _UNITS_MS:
            raise ConfigurationError(f"{setting} must be a duration such as '10 minutes', '30 seconds', '500 ms' or a "
                                     f"datetime.timedelta, got {value!r}")
        ms = float(match.group(1)) * _UNITS_MS[match.group(2)]
    if ms < 0 and not signed:
        raise ConfigurationError(f"{setting} must not be negative, got {value!r}")
    return int(ms)


def is_late(timestamp_ms: int, watermark_ms: int) -> bool:
    """Whether a row of event time ``timestamp_ms`` is late in an epoch of watermark ``watermark_ms``."""
    return timestamp_ms <= watermark_ms


class LateRows(str, enum.Enum):
    DROP = "drop"  # as Spark's stateful operators: not processed, counted in the checkpoint
    PROCESS = "process"  # processed like any row; their timers fire at the end of the epoch
    SIDE_OUTPUT = "side_output"  # not processed, counted, and returned as rows of their own


def judged_by_timestamp(function: Any) -> bool:
    """Whether the runner judges ``function``'s rows late by their own timestamp (``is_late``):
    a function that ``judges_lateness`` itself gets every row and reports the late ones."""
    return not getattr(function, "judges_lateness", False)


@dataclass(frozen=True)
class EventTime:
    """How a job reads event time: the rows' column (or, in the local runner, a function of the
    row) in epoch milliseconds or as a timestamp, how far the watermark trails the largest event
    time, and what happens to late rows."""

    delay_ms: int
    late_rows: LateRows = LateRows.DROP

    @classmethod
    def of(cls, watermark_delay: Any, late_rows: Any = LateRows.DROP) -> "EventTime":
        return cls(duration_ms(watermark_delay, "watermark_delay"), late_rows_policy(late_rows))

    def recorded(self, previous: Mapping[str, Any] | None, largest: int, late_rows: int,
                 end_of_input: bool = False) -> dict[str, int]:
        """The checkpoint's event-time properties of an epoch that restored ``previous`` and saw
        event times up to ``largest``: its watermark (the largest timestamp once the input ended,
        so that every later row is late), the largest event time so far, and its late rows
        (dropped, or given back as the side output)."""
        watermark, seen = self.epoch_start(previous)
        return _recorded(watermark, max(seen, largest), self.late_rows, late_rows, end_of_input)

    def epoch_start(self, previous: Mapping[str, Any] | None) -> tuple[int, int]:
        """(the epoch's watermark, the largest event time before it) from the properties of the
        checkpoint the epoch restores (None: the first epoch)."""
        if not previous:
            return MIN_TIMESTAMP, MIN_TIMESTAMP
        watermark = int(previous.get(WATERMARK, MIN_TIMESTAMP))
        seen = int(previous.get(MAX_EVENT_TIME, MIN_TIMESTAMP))
        if seen > MIN_TIMESTAMP:
            watermark = max(watermark, seen - self.delay_ms)
        return watermark, seen


@dataclass(frozen=True)
class InputsEventTime:
    """The event time of a job of two inputs (connected keyed inputs), each with its own event
    time and delay. The watermark is the smaller of the inputs' watermarks (Flink's rule, and
    Spark's default ``multipleWatermarkPolicy``), never moving back: an input that has had no
    event time yet holds it at the smallest timestamp. The largest event time of each input is
    recorded (``INPUT_EVENT_TIMES``), so a replayed epoch computes the same watermark."""

    delays_ms: tuple[int, ...]
    late_rows: LateRows = LateRows.DROP

    def __post_init__(self) -> None:
        if self.late_rows is LateRows.SIDE_OUTPUT:
            raise ConfigurationError("late_rows='side_output' is for jobs of one input: a job of two inputs drops "
                                     "late rows (counted) or processes them (late_rows='process')")

    @classmethod
    def of(cls, watermark_delays: Sequence[Any], late_rows: Any = LateRows.DROP) -> "InputsEventTime":
        return cls(tuple(duration_ms(d, "watermark_delay") for d in watermark_delays), late_rows_policy(late_rows))

    def epoch_start(self, previous: Mapping[str, Any] | None) -> tuple[int, tuple[int, ...]]:
        """(the epoch's watermark, each input's largest event time before it) from the properties
        of the checkpoint the epoch restores (None: the first epoch)."""
        recorded = (previous or {}).get(INPUT_EVENT_TIMES)
        seen = tuple(int(t) for t in recorded) if recorded and len(recorded) == len(self.delays_ms) else \
            (MIN_TIMESTAMP,) * len(self.delays_ms)
        watermark = int((previous or {}).get(WATERMARK, MIN_TIMESTAMP))
        each = [t - delay if t > MIN_TIMESTAMP else MIN_TIMESTAMP for t, delay in zip(seen, self.delays_ms)]
        return max(watermark, min(each)), seen

    def recorded(self, previous: Mapping[str, Any] | None, largest: Sequence[int], late_rows: int,
                 end_of_input: bool = False) -> dict[str, Any]:
        """As ``EventTime.recorded``, with the largest event time ``largest`` of each input."""
        watermark, seen = self.epoch_start(previous)
        inputs = [max(before, now) for before, now in zip(seen, largest)]
        return {**_recorded(watermark, max(inputs), self.late_rows, late_rows, end_of_input),
                INPUT_EVENT_TIMES: inputs}


def late_rows_policy(late_rows: Any) -> LateRows:
    try:
        return LateRows(late_rows)
    except ValueError:
        raise ConfigurationError(f"late_rows must be one of {[p.value for p in LateRows]}, got {late_rows!r}") \
            from None


def _recorded(watermark: int, largest: int, policy: LateRows, late_rows: int, end_of_input: bool) -> dict[str, int]:
    return {WATERMARK: MAX_TIMESTAMP if end_of_input else watermark, MAX_EVENT_TIME: largest,
            LATE_ROWS_OUTPUT if policy is LateRows.SIDE_OUTPUT else LATE_ROWS: late_rows}


#: the Spark types of event-time columns whose values are datetimes: windows of such a job start and
#: end at datetimes of the same type (an aware one in UTC for ``timestamp``, a naive one for ``timestamp_ntz``)
TIMESTAMP_TYPES = ("timestamp", "timestamp_ntz")
#: checkpoint property of the local runner: the type of its records' event times (one of
#: ``TIMESTAMP_TYPES``, absent for milliseconds), so that an epoch without records keeps it
EVENT_TIME_TYPE = "event_time_type"


def time_type_of(value: Any) -> str | None:
    """The Spark type an event-time value stands for: ``timestamp`` for an aware datetime,
    ``timestamp_ntz`` for a naive one, None for epoch milliseconds."""
    if isinstance(value, datetime.datetime):
        return "timestamp" if value.tzinfo is not None else "timestamp_ntz"
    return None


def timestamp_of_ms(ms: int, type_name: str) -> datetime.datetime:
    """Epoch milliseconds as a value of the Spark type ``type_name`` (one of ``TIMESTAMP_TYPES``)."""
    instant = _EPOCH + datetime.timedelta(milliseconds=ms)
    return instant if type_name == "timestamp" else instant.replace(tzinfo=None)


def event_time_ms(value: Any) -> int:
    """An event time as epoch milliseconds: an int (already milliseconds, within the 64-bit range
    of timestamps, as a Spark ``bigint``) or a ``datetime`` (naive ones are UTC, as Spark's
    timestamps are)."""
    if value.__class__ is int and MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return (value - _EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"an event time must be epoch milliseconds (int) or a datetime, got {value!r} "
                                 f"({type(value).__name__})")
    if not MIN_TIMESTAMP <= value <= MAX_TIMESTAMP:
        raise ConfigurationError(f"event time {value} is outside the 64-bit range of timestamps [{MIN_TIMESTAMP}, "
                                 f"{MAX_TIMESTAMP}] ms: no watermark or timer can hold it; give epoch milliseconds "
                                 f"(a datetime's are timestamp() * 1000)")
    return int(value)  # an int subclass (an IntEnum) as the int it is


def milliseconds(column: "pa.Array") -> "pa.Array":
    """An event-time column (a timestamp, or an integer of epoch milliseconds) as epoch
    milliseconds, rounded down as Spark and ``event_time_ms`` round (-0.5 ms is -1)."""
    import pyarrow as pa  # noqa: PLC0415 - keeps this module light for the drivers' settings
    import pyarrow.compute as pc  # noqa: PLC0415

    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.timestamp("us"))
        return pc.divide(pc.floor_temporal(micros, unit="millisecond").cast(pa.int64()), 1000)
    return column.cast(pa.int64())


@dataclass(frozen=True)
class ElementTimes:
    """How the runtime reads the event time of what it processes, for state whose TTL runs on
    event time (``KeyedStateBackend.set_element_time``): ``of_row`` gives a row's (None: it has
    none), ``of_rows`` the largest of a batch of rows (None: none has one)."""

    of_row: Callable[[Any], int | None]
    of_rows: Callable[["pa.RecordBatch"], int | None]

    @classmethod
    def of_column(cls, column: str) -> "ElementTimes":
        """Rows whose event time is column ``column`` (rows as dicts, batches as Arrow)."""
        def of_row(row: Any) -> int | None:
            value = row[column]
            return None if value is None else event_time_ms(value)

        def of_rows(rows: "pa.RecordBatch") -> int | None:
            import pyarrow.compute as pc  # noqa: PLC0415

            return pc.max(milliseconds(rows.column(column))).as_py()
        return cls(of_row, of_rows)

    @classmethod
    def of_function(cls, event_time: Callable[[Any], Any]) -> "ElementTimes":
        """Records whose event time is ``event_time(record)`` (the local runner's); a batch's rows
        are given to it as dicts."""
        def of_row(row: Any) -> int | None:
            value = event_time(row)
            return None if value is None else event_time_ms(value)

        def of_rows(rows: "pa.RecordBatch") -> int | None:
            return max((t for t in map(of_row, rows.to_pylist()) if t is not None), default=None)
        return cls(of_row, of_rows)

    @classmethod
    def of_inputs(cls, inputs: Sequence["ElementTimes | None"]) -> "ElementTimes":
        """Records of a job of several inputs, ``(input, row)`` pairs: the row's event time as its
        input's ``ElementTimes`` reads it (None for an input without event time)."""
        def of_row(record: tuple[int, Any]) -> int | None:
            times = inputs[record[0]]
            return times.of_row(record[1]) if times is not None else None

        def of_rows(rows: "pa.RecordBatch") -> int | None:
            raise NotImplementedError("rows of several inputs are read one at a time")
        return cls(of_row, of_rows)
