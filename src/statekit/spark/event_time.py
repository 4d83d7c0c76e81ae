"""Event time under Spark: the event-time column read with Arrow compute in each subtask (its
largest value, and late rows dropped, kept or set aside as the side output, and counted), and the driver's side that turns the
subtasks' reports into the checkpoint's record (``runtime.event_time``).

The event-time column is a ``timestamp`` (``timestamp_ntz`` too) or an integer of epoch
milliseconds. Rows whose event time is null are processed and do not move the watermark.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ByteType, DataType, IntegerType, LongType, ShortType, StructType, TimestampNTZType, TimestampType,
)

from statekit.runtime.event_time import EventTime, LateRows, judged_by_timestamp, milliseconds
from statekit.spi.errors import ConfigurationError
from statekit.spi.timers import MIN_TIMESTAMP

_TYPES = (TimestampType, TimestampNTZType, LongType, IntegerType, ShortType, ByteType)


@dataclass(frozen=True)
class EventTimeColumn:
    """A job's event time: its column and the watermark rule."""

    column: str
    rule: EventTime
    #: ``timestamp`` or ``timestamp_ntz`` for a timestamp column, None for epoch milliseconds
    type_name: str | None = None

    @classmethod
    def of(cls, schema: StructType, column: str | None, watermark_delay: Any, late_rows: Any) -> "EventTimeColumn | None":
        if column is None and watermark_delay is None:
            return None
        if column is None or watermark_delay is None:
            raise ConfigurationError("event_time and watermark_delay go together: give the event-time column and "
                                     "how far the watermark trails it (e.g. watermark_delay='10 minutes'), or neither")
        if column not in schema.names:
            raise ConfigurationError(f"event_time={column!r} is not a column of the DataFrame ({schema.names})")
        data_type: DataType = schema[column].dataType
        if not isinstance(data_type, _TYPES):
            raise ConfigurationError(f"event_time column {column!r} is {data_type.simpleString()}: it must be a "
                                     f"timestamp or an integer of epoch milliseconds (cast it, e.g. "
                                     f"F.col({column!r}).cast('timestamp'))")
        type_name = data_type.simpleString() if isinstance(data_type, (TimestampType, TimestampNTZType)) else None
        return cls(column, EventTime.of(watermark_delay, late_rows), type_name)


@dataclass(frozen=True)
class SubtaskEventTime:
    """What a subtask needs: the column, the epoch's watermark, the late-row policy, and whether
    rows are judged late by their timestamp (else the function judges, ``judged_by_timestamp``)."""

    column: str
    watermark_ms: int
    late_rows: LateRows
    type_name: str | None = None
    by_timestamp: bool = True


class EventTimeTracker:
    """Watches a subtask's batches: the largest event time, and the rows late by their timestamp,
    counted and dropped, kept, or handed to ``set_aside`` (the side output) as the policy says."""

    def __init__(self, spec: SubtaskEventTime, rows_mask: Callable[[pa.RecordBatch], pa.Array],
                 set_aside: Callable[[pa.RecordBatch], None] | None = None) -> None:
        self._spec = spec
        self._rows_mask = rows_mask  # true on rows, false on the engine's marker rows
        self._set_aside = set_aside
        self.max_event_time_ms = MIN_TIMESTAMP
        self.late_rows = 0

    def filtered(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self._spec
        for batch in batches:
            times = milliseconds(batch.column(spec.column))
            rows = self._rows_mask(batch)
            largest = pc.max(pc.filter(times, rows)).as_py()
            if largest is not None and largest > self.max_event_time_ms:
                self.max_event_time_ms = largest
            if not spec.by_timestamp:
                yield batch
                continue
            late = pc.fill_null(pc.and_(rows, pc.less_equal(times, spec.watermark_ms)), False)
            count = pc.sum(late.cast(pa.int64())).as_py() or 0
            self.late_rows += count
            if not count or spec.late_rows is LateRows.PROCESS:
                yield batch
                continue
            if spec.late_rows is LateRows.SIDE_OUTPUT and self._set_aside is not None:
                self._set_aside(batch.filter(late))
            yield batch.filter(pc.invert(late))


def subtask_event_time(event_time: EventTimeColumn | None, previous: dict[str, Any] | None,
                       function: Any) -> SubtaskEventTime | None:
    """The epoch's event-time settings of ``function`` from the properties of the checkpoint it restores."""
    if event_time is None:
        return None
    watermark, _ = event_time.rule.epoch_start(previous)
    return SubtaskEventTime(event_time.column, watermark, event_time.rule.late_rows, event_time.type_name,
                            judged_by_timestamp(function))


def recorded_event_time(event_time: EventTimeColumn | None, previous: dict[str, Any] | None,
                        reports: list[tuple[int, int]], end_of_input: bool = False) -> dict[str, int]:
    """The checkpoint's event-time properties (``EventTime.recorded``) from the subtasks' (largest
    event time, late rows) reports."""
    if event_time is None:
        return {}
    return event_time.rule.recorded(previous, max((largest for largest, _ in reports), default=MIN_TIMESTAMP),
                                    sum(late for _, late in reports), end_of_input)
