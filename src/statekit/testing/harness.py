"""A keyed function driven step by step, as Flink's keyed operator test harness drives an operator:
elements, watermarks and processing times interleaved in any order, snapshots taken and restored
(into another function instance or another backend) between any two steps.

::

    harness = KeyedHarness(windows.aggregate(windows.TumblingWindows.of("3 seconds"), Sum(),
                                             timestamp="ts", value=lambda row: row["v"]),
                           key_selector=lambda row: row["k"])
    harness.process_element({"k": "a", "ts": 20, "v": 1})
    harness.process_watermark(2999)          # fires the event-time timers up to 2999
    assert harness.take_output() == [("a", 0, 3000, 1)]
    later = KeyedHarness.restored(harness.snapshot(), function, key_selector=..., state_backend=RocksDBStateBackend())

A runner's epoch derives its watermark from earlier epochs and fires timers after its rows; the
harness instead sets the watermark and the processing time as told and fires what is due at once
(Flink's order), with one subtask of the whole key space and every row processed (none is dropped
as late: the function judges, and ``take_late_output`` gives the rows it reported late, Flink's
side output of late data). It runs the function through the same ``KeyedTask`` the runners use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from statekit.checkpoint.metadata import SubtaskState
from statekit.runtime.function import ProcessFunction, check_function
from statekit.runtime.task import KeyedTask, TaskRestore
from statekit.spi.backend import StateBackend, SubtaskInfo
from statekit.spi.errors import ConfigurationError
from statekit.spi.key_groups import key_group_for_key, spark_key
from statekit.spi.timers import MIN_TIMESTAMP
from statekit.storage.inline import InlineStreams

#: the key groups of a harness (its one subtask holds all of them)
MAX_PARALLELISM = 128


@dataclass(frozen=True)
class HarnessSnapshot:
    """A harness's state (inline, canonical: any backend restores it) and its times."""

    checkpoint_id: int
    state: SubtaskState
    watermark_ms: int
    processing_time_ms: int


class KeyedHarness:
    """One function instance on one subtask holding every key group, stepped by hand."""

    def __init__(self, function: ProcessFunction, key_selector: Callable[[Any], Any], *,
                 state_backend: StateBackend | None = None, key_types: Sequence[str] | None = None,
                 processing_time_ms: int = 0, local_dir: str | None = None,
                 restore: HarnessSnapshot | None = None) -> None:
        """``key_types``: the key columns' Spark types, by which keys are hashed to key groups as
        under Spark (default: inferred from each key's value). ``restore``: start from a snapshot
        (``restored`` is the readable form)."""
        from statekit.backends.heap import HeapStateBackend  # noqa: PLC0415 - the default backend

        check_function(function)
        if not callable(key_selector):
            raise ConfigurationError(f"key_selector must be a function from a row to its key, got {key_selector!r}")
        self.function = function
        self._key_selector = key_selector
        self._key_types = key_types
        self._output: list[Any] = []
        self._checkpoint_id = restore.checkpoint_id if restore is not None else 0
        task_restore = None
        if restore is not None:
            task_restore = TaskRestore(restore.checkpoint_id, restore.state.keyed, (restore.state.operator,),
                                       InlineStreams())
        self._task = KeyedTask.create(function, state_backend or HeapStateBackend(),
                                      SubtaskInfo("harness", "keyed-process", 0, 1, MAX_PARALLELISM),
                                      self._checkpoint_id + 1, restore=task_restore, local_dir=local_dir)
        self._task.context.late_output = []
        try:
            self._task.begin_epoch(restore.processing_time_ms if restore is not None else processing_time_ms, 0.0,
                                   restore.watermark_ms if restore is not None else MIN_TIMESTAMP)
            self._task.open()
        except BaseException:
            self._task.close()
            raise

    @classmethod
    def restored(cls, snapshot: HarnessSnapshot, function: ProcessFunction, key_selector: Callable[[Any], Any],
                 **options: Any) -> "KeyedHarness":
        """A new harness of ``function`` (a fresh instance, as after a failure) from ``snapshot``."""
        return cls(function, key_selector, restore=snapshot, **options)

    @property
    def watermark_ms(self) -> int:
        return self._task.context.time.watermark_ms

    @property
    def processing_time_ms(self) -> int:
        return self._task.context.time.processing_time_ms

    def process_element(self, row: Any) -> None:
        """Process one row with the current watermark and processing time."""
        key = spark_key(self._key_selector(row), self._key_types)
        self._task.process_all([(key, key_group_for_key(key, MAX_PARALLELISM, self._key_types), row)],
                               self._output)

    def process_elements(self, rows: Sequence[Any]) -> None:
        for row in rows:
            self.process_element(row)

    def process_watermark(self, watermark_ms: int) -> None:
        """Move the watermark to ``watermark_ms`` (never back) and fire the event-time timers up to it."""
        if watermark_ms < self.watermark_ms:
            raise ConfigurationError(f"the watermark moves forward only: it is {self.watermark_ms}, got {watermark_ms}")
        self._task.set_watermark(watermark_ms)
        self._task.fire_timers(self._output)

    def set_processing_time(self, processing_time_ms: int) -> None:
        """Move processing time to ``processing_time_ms`` (never back) and fire the processing-time
        timers up to it."""
        if processing_time_ms < self.processing_time_ms:
            raise ConfigurationError(f"processing time moves forward only: it is {self.processing_time_ms}, got "
                                     f"{processing_time_ms}")
        self._task.keyed_backend.set_processing_time(processing_time_ms)
        self._task.context.time.processing_time_ms = processing_time_ms
        self._task.fire_timers(self._output)

    def end_input(self) -> None:
        """The input ended: the watermark moves to the largest timestamp and every event-time timer fires."""
        self._task.end_input()
        self._task.fire_timers(self._output)

    def take_output(self) -> list[Any]:
        """The output rows since the last call, in the order the function produced them."""
        output, self._output = self._output, []
        return output

    def take_late_output(self) -> list[Any]:
        """The rows the function reported late since the last call (``KeyedContext.report_late``)."""
        late, self._task.context.late_output = self._task.context.late_output, []
        return late

    def snapshot(self) -> HarnessSnapshot:
        """The state now, in the canonical format, held in memory."""
        self._checkpoint_id += 1
        pending = self._task.snapshot()
        try:
            state = pending.write(InlineStreams())
        except BaseException:
            pending.release()
            raise
        return HarnessSnapshot(self._checkpoint_id, state, self.watermark_ms, self.processing_time_ms)

    def close(self) -> None:
        """Close the function and dispose the backends."""
        self._task.close()

    def __enter__(self) -> "KeyedHarness":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
