"""The inputs of a job on the local runner, and how a record's input, key and event time are read:
one keyed input (records are rows), or two connected keyed inputs of a ``KeyedCoProcessFunction``
(records are ``("left", row)`` and ``("right", row)`` pairs, each input with its own key selector
and event time). The broadcast input of a ``KeyedBroadcastProcessFunction`` is not keyed: its rows
go to every subtask (``LocalRunner.run_epoch(..., broadcast=rows)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from statekit.runtime.event_time import ElementTimes, EventTime, InputsEventTime
from statekit.runtime.function import KeyedCoProcessFunction
from statekit.spi.errors import ConfigurationError

#: the names of the two inputs of a connected job, in input order (``process_left``, ``process_right``)
INPUT_NAMES = ("left", "right")


def per_input(setting: str, value: Any, names: Sequence[str]) -> tuple[Any, ...]:
    """A setting of each input: one value for all, or a dict of input name to value."""
    if not isinstance(value, Mapping):
        return (value,) * len(names)
    if set(value) != set(names):
        raise ConfigurationError(f"{setting} as a dict names each input: {list(names)}, got {sorted(value)}")
    return tuple(value[name] for name in names)


@dataclass(frozen=True)
class JobInputs:
    """How records are read: ``split`` gives a record's (input index, row)."""

    names: tuple[str, ...]
    key_selectors: tuple[Callable[[Any], Any], ...]
    #: each input's event time as a function of the row (None: no event time), and its field name if given one
    event_times: tuple[Callable[[Any], Any] | None, ...]
    event_time_fields: tuple[str | None, ...]

    @classmethod
    def of(cls, function: Any, key_selector: Any, event_time: Any) -> "JobInputs":
        names = INPUT_NAMES if isinstance(function, KeyedCoProcessFunction) else ("input",)
        selectors = per_input("key_selector", key_selector, names) if len(names) > 1 else (key_selector,)
        for selector in selectors:
            if not callable(selector):
                raise ConfigurationError(f"key_selector must be a function from a record to its key"
                                         f"{' (or a dict of one per input: left, right)' if len(names) > 1 else ''}, "
                                         f"got {selector!r}")
        times = per_input("event_time", event_time, names) if len(names) > 1 else (event_time,)
        return cls(names, selectors, tuple(row_reader(t, "event_time") for t in times),
                   tuple(t if isinstance(t, str) else None for t in times))

    @property
    def connected(self) -> bool:
        return len(self.names) > 1

    def split(self, record: Any) -> tuple[int, Any]:
        """(the index of the record's input, its row)."""
        if not self.connected:
            return 0, record
        if isinstance(record, tuple) and len(record) == 2 and record[0] in INPUT_NAMES:
            return INPUT_NAMES.index(record[0]), record[1]
        raise ConfigurationError(f"a record of a KeyedCoProcessFunction is a pair (input, row) whose input is 'left' "
                                 f"(process_left) or 'right' (process_right), got {record!r}")

    def event_time_rule(self, watermark_delay: Any, late_rows: Any) -> EventTime | InputsEventTime | None:
        """The watermark rule of the job's event time (None: the job has none)."""
        given = [t is not None for t in self.event_times]
        delays = per_input("watermark_delay", watermark_delay, self.names) if self.connected else (watermark_delay,)
        if any(given) != (watermark_delay is not None) or (self.connected and not all(given) and any(given)):
            raise ConfigurationError("event_time and watermark_delay go together: give both (the event time of a "
                                     "record and how far the watermark trails it"
                                     + (", for each input" if self.connected else "") + ") or neither")
        if watermark_delay is None:
            return None
        return InputsEventTime.of(delays, late_rows) if self.connected else EventTime.of(delays[0], late_rows)

    def element_times(self) -> ElementTimes | None:
        """How the task reads the event time of what it processes (event-time TTL)."""
        each = [ElementTimes.of_function(t) if t is not None else None for t in self.event_times]
        if not self.connected:
            return each[0]
        return ElementTimes.of_inputs(each) if any(each) else None


def row_reader(value: Callable[[Any], Any] | str | None, setting: str) -> Callable[[Any], Any] | None:
    """A value of a row: a function of the row, or the name of a dict row's field (None: none)."""
    if value is None or callable(value):
        return value
    if isinstance(value, str):
        field = value
        return lambda record: record[field]
    raise ConfigurationError(f"{setting} must be a function of a record or the name of a field, got {value!r}")
