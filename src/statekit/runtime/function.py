"""The user-facing function API (Flink's ``KeyedProcessFunction`` and ``CheckpointedFunction``).

::

    class CountPerKey(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

        def process(self, row, ctx):
            n = self.count.value() + 1
            self.count.update(n)
            yield (ctx.current_key, n)
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Iterable, TypeVar, Union, overload

from statekit.spi.backend import KeyedStateBackend, OperatorStateBackend, SubtaskInfo
from statekit.spi.descriptors import (
    AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor, StateDescriptor,
    ValueStateDescriptor,
)
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import AggregatingState, ListState, MapState, ReducingState, State, ValueState

if TYPE_CHECKING:
    import pyarrow

K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")


class KeyedContext:
    """Handed to ``open`` and ``process``: state access and where the function runs."""

    def __init__(self, backend: KeyedStateBackend, subtask: SubtaskInfo, checkpoint_id: int) -> None:
        self._backend = backend
        self.subtask_index = subtask.subtask_index
        self.parallelism = subtask.parallelism
        self.max_parallelism = subtask.max_parallelism
        self.job_id = subtask.job_id
        #: the id of the checkpoint this epoch will produce (the epoch number)
        self.checkpoint_id = checkpoint_id

    @overload
    def get_state(self, descriptor: ValueStateDescriptor[V],
                  namespace_serializer: TypeSerializer | None = None) -> ValueState[V]: ...

    @overload
    def get_state(self, descriptor: ListStateDescriptor[V],
                  namespace_serializer: TypeSerializer | None = None) -> ListState[V]: ...

    @overload
    def get_state(self, descriptor: MapStateDescriptor[K, V],
                  namespace_serializer: TypeSerializer | None = None) -> MapState[K, V]: ...

    @overload
    def get_state(self, descriptor: ReducingStateDescriptor[V],
                  namespace_serializer: TypeSerializer | None = None) -> ReducingState[V]: ...

    @overload
    def get_state(self, descriptor: AggregatingStateDescriptor[IN, Any, OUT],
                  namespace_serializer: TypeSerializer | None = None) -> AggregatingState[IN, OUT]: ...

    def get_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None = None) -> State:
        """The state of ``descriptor``, scoped to the current key (get-or-create); typed by the
        descriptor (``ValueStateDescriptor[int]`` gives a ``ValueState[int]``)."""
        return self._backend.get_state(descriptor, namespace_serializer)

    @property
    def current_key(self) -> Any:
        return self._backend.current_key

    @property
    def current_key_group(self) -> int:
        return self._backend.current_key_group

    def keys(self, state_name: str, namespace: Any = None) -> Iterable[Any]:
        """Every key of this subtask that has state ``state_name``."""
        return self._backend.keys(state_name, namespace)


class KeyedProcessFunction(ABC):
    """Processes the rows of each key with keyed state. One instance per subtask."""

    def open(self, ctx: KeyedContext) -> None:
        """Called once per epoch before any row: register states here."""

    @abstractmethod
    def process(self, row: Any, ctx: KeyedContext) -> Iterable[Any] | None:
        """Process one row of ``ctx.current_key``; return or yield output rows (or None)."""

    def close(self) -> None:
        """Called once per epoch after the last row and after the epoch's snapshot: state changes
        made here are not part of the checkpoint, so do not change state here."""


class KeyedBatchFunction(ABC):
    """Processes each key's rows a batch at a time: the vectorized form of
    ``KeyedProcessFunction``, for per-key work that is cheaper on many rows at once (counts,
    sums, last values) than one call per row. One instance per subtask.

    ::

        class CountPerKey(KeyedBatchFunction):
            def open(self, ctx):
                self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

            def process_rows(self, key, rows, ctx):
                n = self.count.value() + rows.num_rows
                self.count.update(n)
                return [(key, n)]
    """

    def open(self, ctx: KeyedContext) -> None:
        """Called once per epoch before any row: register states here."""

    @abstractmethod
    def process_rows(self, key: Any, rows: "pyarrow.RecordBatch", ctx: KeyedContext) -> Iterable[Any] | None:
        """Process rows of ``key`` (the current key), in input order, as Arrow columns without the
        engine's own columns. A key with many rows may be called several times in one epoch, once
        per input batch it occurs in, in order. Return or yield output rows (or None)."""

    def close(self) -> None:
        """Called once per epoch after the last row and after the epoch's snapshot: state changes
        made here are not part of the checkpoint, so do not change state here."""


#: what a task runs: one call per row, or one call per key and batch of rows
ProcessFunction = Union[KeyedProcessFunction, KeyedBatchFunction]


def check_function(function: object) -> None:
    """A ``ConfigurationError`` unless ``function`` is a ``KeyedProcessFunction`` or a ``KeyedBatchFunction``."""
    if not isinstance(function, (KeyedProcessFunction, KeyedBatchFunction)):
        kind = "a class: pass an instance" if isinstance(function, type) else f"a {type(function).__name__}"
        raise ConfigurationError(f"the function must be a KeyedProcessFunction or a KeyedBatchFunction instance, "
                                 f"got {function!r} ({kind}); subclass one of them and implement process (or "
                                 f"process_rows)")


class FunctionInitializationContext:
    def __init__(self, operator_state: OperatorStateBackend, keyed: KeyedContext,
                 restored_checkpoint_id: int | None) -> None:
        self.operator_state = operator_state
        self.keyed = keyed
        self.restored_checkpoint_id = restored_checkpoint_id

    @property
    def is_restored(self) -> bool:
        """True when the task restored state from a checkpoint or savepoint."""
        return self.restored_checkpoint_id is not None


class FunctionSnapshotContext:
    def __init__(self, checkpoint_id: int) -> None:
        self.checkpoint_id = checkpoint_id


class CheckpointedFunction(ABC):
    """Mix into a function that keeps operator (non-keyed) state."""

    @abstractmethod
    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        """Called before ``open``: get operator state from ``ctx.operator_state``."""

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        """Called before each snapshot: bring operator state up to date."""
