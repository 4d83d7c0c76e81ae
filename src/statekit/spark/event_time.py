"""Event time under Spark: the event-time column read with Arrow compute in each subtask (its
largest value, and late rows dropped, kept or set aside as the side output, and counted), and the driver's side that turns the
subtasks' reports into the checkpoint's record (``runtime.event_time``).

The event-time column is a ``timestamp`` (``timestamp_ntz`` too) or an integer of epoch
milliseconds. Rows whose event time is null are processed and do not move the watermark.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ByteType, DataType, IntegerType, LongType, ShortType, StructType, TimestampNTZType, TimestampType,
)

from statekit.runtime.event_time import (
    ElementTimes, EventTime, InputsEventTime, LateRows, judged_by_timestamp, milliseconds,
)
from statekit.spi.errors import ConfigurationError
from statekit.spi.timers import MIN_TIMESTAMP

_TYPES = (TimestampType, TimestampNTZType, LongType, IntegerType, ShortType, ByteType)


@dataclass(frozen=True)
class EventTimeColumn:
    """A job's event time: its column and the watermark rule. A job of several inputs reads each
    input's event time from a field of that input's struct column (``spark.inputs``)."""

    column: str
    rule: EventTime | InputsEventTime
    #: ``timestamp`` or ``timestamp_ntz`` for a timestamp column, None for epoch milliseconds
    type_name: str | None = None
    #: several inputs: the column of each row's input, and each input's (struct column, field)
    input_column: str | None = None
    input_fields: tuple[tuple[str, str], ...] = ()

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

    @classmethod
    def of_inputs(cls, schemas: Sequence[StructType], columns: Sequence[str | None], delays: Sequence[Any],
                  late_rows: Any, input_column: str, structs: Sequence[str]) -> "EventTimeColumn | None":
        """The event time of a job of several inputs: each input's column (of its own schema) and
        delay; the watermark is the smallest of the inputs' (``InputsEventTime``)."""
        each = [cls.of(schema, column, delay, late_rows) for schema, column, delay in zip(schemas, columns, delays)]
        if all(e is None for e in each):
            return None
        if any(e is None for e in each):
            raise ConfigurationError("a job of two inputs has event time on both or on neither: give event_time and "
                                     "watermark_delay for each input (one value for both, or a dict of one per "
                                     "input)")
        types = {e.type_name for e in each}  # type: ignore[union-attr]
        return cls("", InputsEventTime(tuple(e.rule.delay_ms for e in each),  # type: ignore[union-attr]
                                       each[0].rule.late_rows),  # type: ignore[union-attr]
                   types.pop() if len(types) == 1 else None, input_column,
                   tuple((struct, e.column) for struct, e in zip(structs, each)))  # type: ignore[union-attr]


@dataclass(frozen=True)
class SubtaskEventTime:
    """What a subtask needs: the column, the epoch's watermark, the late-row policy, and whether
    rows are judged late by their timestamp (else the function judges, ``judged_by_timestamp``)."""

    column: str
    watermark_ms: int
    late_rows: LateRows
    type_name: str | None = None
    by_timestamp: bool = True
    #: several inputs (``EventTimeColumn``): the column of each row's input, each input's (struct, field)
    input_column: str | None = None
    input_fields: tuple[tuple[str, str], ...] = ()

    @property
    def inputs(self) -> int:
        return len(self.input_fields) or 1

    def times(self, batch: pa.RecordBatch) -> pa.Array:
        """Each row's event time in epoch milliseconds (null where it has none)."""
        if not self.input_fields:
            return milliseconds(batch.column(self.column))
        inputs = batch.column(self.input_column)
        times = None
        for index, (struct, field) in enumerate(self.input_fields):
            values = milliseconds(_field(batch.column(struct), field))
            times = values if times is None else pc.if_else(pc.equal(inputs, index), values, times)
        return times

    def element_times(self) -> ElementTimes:
        """How the task reads the event time of a row it processes (event-time TTL)."""
        if not self.input_fields:
            return ElementTimes.of_column(self.column)
        return ElementTimes.of_inputs([ElementTimes.of_column(field) for _, field in self.input_fields])


def _field(struct: pa.Array, name: str) -> pa.Array:
    """A field of a struct column, null where the struct is null (its values there are undefined)."""
    return struct.flatten()[struct.type.get_field_index(name)]


class EventTimeTracker:
    """Watches a subtask's batches: the largest event time of each input, and the rows late by
    their timestamp, counted and dropped, kept, or handed to ``set_aside`` (the side output) as
    the policy says."""

    def __init__(self, spec: SubtaskEventTime, rows_mask: Callable[[pa.RecordBatch], pa.Array],
                 set_aside: Callable[[pa.RecordBatch], None] | None = None) -> None:
        self._spec = spec
        self._rows_mask = rows_mask  # true on rows, false on the engine's marker rows
        self._set_aside = set_aside
        self.max_event_times_ms = [MIN_TIMESTAMP] * spec.inputs
        self.late_rows = 0

    @property
    def max_event_time_ms(self) -> int:
        return max(self.max_event_times_ms)

    def filtered(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self._spec
        for batch in batches:
            times = spec.times(batch)
            rows = self._rows_mask(batch)
            self._note_largest(batch, times, rows)
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

    def _note_largest(self, batch: pa.RecordBatch, times: pa.Array, rows: pa.Array) -> None:
        spec = self._spec
        for index in range(spec.inputs):
            of_input = rows if not spec.input_fields else pc.and_(rows, pc.equal(batch.column(spec.input_column),
                                                                                 index))
            largest = pc.max(pc.filter(times, of_input)).as_py()
            if largest is not None and largest > self.max_event_times_ms[index]:
                self.max_event_times_ms[index] = largest


def subtask_event_time(event_time: EventTimeColumn | None, previous: dict[str, Any] | None,
                       function: Any) -> SubtaskEventTime | None:
    """The epoch's event-time settings of ``function`` from the properties of the checkpoint it restores."""
    if event_time is None:
        return None
    watermark, _ = event_time.rule.epoch_start(previous)
    return SubtaskEventTime(event_time.column, watermark, event_time.rule.late_rows, event_time.type_name,
                            judged_by_timestamp(function), event_time.input_column, event_time.input_fields)


def recorded_event_time(event_time: EventTimeColumn | None, previous: dict[str, Any] | None,
                        reports: list[tuple[Sequence[int], int]], end_of_input: bool = False) -> dict[str, Any]:
    """The checkpoint's event-time properties (``EventTime.recorded``) from the subtasks'
    (largest event time of each input, late rows) reports."""
    if event_time is None:
        return {}
    inputs = len(event_time.input_fields) or 1
    largest = [max((report[0][i] for report in reports), default=MIN_TIMESTAMP) for i in range(inputs)]
    late = sum(report[1] for report in reports)
    if isinstance(event_time.rule, InputsEventTime):
        return event_time.rule.recorded(previous, largest, late, end_of_input)
    return event_time.rule.recorded(previous, largest[0], late, end_of_input)
