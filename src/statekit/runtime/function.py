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
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeVar, Union, overload

from statekit.spi.backend import KeyedStateBackend, OperatorStateBackend, SubtaskInfo
from statekit.spi.bulk_state import BulkState
from statekit.spi.descriptors import (
    AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor, StateDescriptor,
    ValueStateDescriptor,
)
from statekit.spi.errors import ConfigurationError, StateAccessError
from statekit.spi.serializer import TypeSerializer
from statekit.runtime.timers import USER_TIMERS, EpochTime, TimerService
from statekit.spi.state import (
    AggregatingState, BroadcastState, ListState, MapState, ReducingState, State, ValueState,
)
from statekit.spi.timers import TimeDomain, Timer

if TYPE_CHECKING:
    import pyarrow

    from statekit.runtime.grouped_rows import GroupedRows

K = TypeVar("K")
V = TypeVar("V")
IN = TypeVar("IN")
OUT = TypeVar("OUT")


class KeyedContext:
    """Handed to ``open``, ``process`` and ``on_timer``: state, timers, and where the function runs."""

    def __init__(self, backend: KeyedStateBackend, subtask: SubtaskInfo, checkpoint_id: int,
                 time: EpochTime | None = None, operator_backend: OperatorStateBackend | None = None) -> None:
        self._backend = backend
        self._operator_backend = operator_backend
        self.subtask_index = subtask.subtask_index
        self.parallelism = subtask.parallelism
        self.max_parallelism = subtask.max_parallelism
        self.job_id = subtask.job_id
        #: the id of the checkpoint this epoch will produce (the epoch number)
        self.checkpoint_id = checkpoint_id
        self.time = time or EpochTime()
        #: while ``on_timer`` runs: the timer that fired and its time domain (None otherwise)
        self.timer: Timer | None = None
        self.time_domain: TimeDomain | None = None
        self._timer_services: dict[str, TimerService] = {}
        #: how many rows the function reported late this epoch (``report_late``), and those rows
        #: where the job returns them as its side output (None: counted only)
        self.late_rows = 0
        self.late_output: list[Any] | None = None
        #: the read-only views of broadcast state, by name
        self._broadcast_views: dict[str, ReadOnlyBroadcastState] = {}

    def report_late(self, row: Any) -> None:
        """For a function that ``judges_lateness``: ``row`` came too late to be processed. It is
        counted, and returned as the job's side output of late rows where the job asks for one
        (``late_rows="side_output"``)."""
        self.late_rows += 1
        if self.late_output is not None:
            self.late_output.append(row)

    def timer_service(self, name: str = USER_TIMERS, namespace_serializer: TypeSerializer | None = None) -> TimerService:
        """The timers of the current key (``on_timer`` is called when one fires). A library that
        keeps its own timers passes its own ``name``; ``namespace_serializer`` serializes the
        namespaces its timers are scoped to."""
        service = self._timer_services.get(name)
        if service is None:
            service = self._timer_services[name] = TimerService(self._backend, self.time, name, namespace_serializer)
        return service

    @property
    def timer_services_used(self) -> int:
        """How many timer services the function used so far (firing timers looks for new queues when it grows)."""
        return len(self._timer_services)

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

    def get_bulk_state(self, descriptor: StateDescriptor, namespace_serializer: TypeSerializer | None = None) -> BulkState:
        """The state of ``descriptor`` read and written for many keys per call (``spi.bulk_state``;
        a ``KeyedVectorFunction`` passes its ``GroupedRows`` as the keys). The cells are the ones
        ``get_state`` reaches, so both may be used on the same state."""
        return self._backend.get_bulk_state(descriptor, namespace_serializer)

    def set_current_key(self, key: Any, key_group: int) -> None:
        """Make ``key`` current for per-key state and timers: in a ``KeyedVectorFunction``, whose
        calls have no current key (``groups.keys[i]`` with ``groups.key_groups[i]``)."""
        self._backend.set_current_key(key, key_group)

    @property
    def current_key(self) -> Any:
        return self._backend.current_key

    @property
    def current_key_group(self) -> int:
        return self._backend.current_key_group

    def keys(self, state_name: str, namespace: Any = None) -> Iterable[Any]:
        """Every key of this subtask that has state ``state_name``."""
        return self._backend.keys(state_name, namespace)

    def broadcast_state(self, descriptor: MapStateDescriptor[K, V]) -> BroadcastState[K, V]:
        """The broadcast state of ``descriptor`` (a map, the same on every subtask) of a
        ``KeyedBroadcastProcessFunction``: read-only here; ``process_broadcast`` changes it."""
        views = self._broadcast_views
        view = views.get(descriptor.name) if isinstance(descriptor, MapStateDescriptor) else None
        if view is None:  # made once per name: a registration resolves serializers (microseconds per row)
            view = views[descriptor.name] = ReadOnlyBroadcastState(self._broadcast_state(descriptor))
        return view

    def _broadcast_state(self, descriptor: MapStateDescriptor[K, V]) -> BroadcastState[K, V]:
        if not isinstance(descriptor, MapStateDescriptor):
            raise ConfigurationError(f"broadcast state is a map: give a MapStateDescriptor, got {descriptor!r}")
        if self._operator_backend is None:
            raise ConfigurationError("this context has no operator state, which broadcast state is")
        return self._operator_backend.get_broadcast_state(descriptor.name, descriptor.key_serializer,
                                                          descriptor.value_serializer)


class KeyedFunction(ABC):
    """What both function kinds share: the epoch's ``open`` and ``close``, and ``on_timer``."""

    #: True: the runner hands the function every row of an event-time job, late or not, and the
    #: function reports the ones it finds late (``KeyedContext.report_late``); an event-time window
    #: does, judging a row by its windows' cleanup times. False: the runner judges rows by their own
    #: event time against the watermark (``runtime.event_time``).
    judges_lateness: bool = False
    #: True for a function of another kind that takes whole batches too, as a ``KeyedVectorFunction``
    #: does (``process_groups``), where it can: the window operator with a vectorized aggregate.
    #: The engines then call ``process_groups``; the local runner calls ``process`` for rows that
    #: make no Arrow columns (rows that are not dicts)
    processes_groups: bool = False

    def open(self, ctx: KeyedContext) -> None:
        """Called once per epoch before any row: register states here."""

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterable[Any] | None:
        """A timer of ``ctx.current_key`` fired (``ctx.time_domain``; ``ctx.timer`` has its namespace):
        return or yield output rows, as from processing rows. Implement it when the function
        registers timers (``ctx.timer_service()``)."""
        raise ConfigurationError(f"{type(self).__name__} registered a timer that fired at {timestamp} "
                                 f"({ctx.time_domain.value if ctx.time_domain else 'no time domain'}) but does not "
                                 f"implement on_timer(timestamp, ctx): implement it, or do not register timers")

    def close(self) -> None:
        """Called once per epoch after the last row and after the epoch's snapshot: state changes
        made here are not part of the checkpoint, so do not change state here."""


class KeyedProcessFunction(KeyedFunction):
    """Processes the rows of each key with keyed state. One instance per subtask."""

    @abstractmethod
    def process(self, row: Any, ctx: KeyedContext) -> Iterable[Any] | None:
        """Process one row of ``ctx.current_key``; return or yield output rows (or None)."""


class KeyedBatchFunction(KeyedFunction):
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

    @abstractmethod
    def process_rows(self, key: Any, rows: "pyarrow.RecordBatch", ctx: KeyedContext) -> Iterable[Any] | None:
        """Process rows of ``key`` (the current key), in input order, as Arrow columns without the
        engine's own columns. A key with many rows may be called several times in one epoch, once
        per input batch it occurs in, in order. Return or yield output rows (or None)."""


class KeyedVectorFunction(KeyedFunction):
    """Processes a whole batch of rows per call, grouped by key: the form for work that is
    vectorized across keys (NumPy, Arrow compute) with state read and written in bulk, so that no
    Python call is made per key. One instance per subtask.

    ::

        class CountPerKey(KeyedVectorFunction):
            def open(self, ctx):
                self.count = ctx.get_bulk_state(ValueStateDescriptor("count", Int64Serializer(), default=0))

            def process_groups(self, groups, ctx):
                counts = np.add(self.count.get_many(groups), groups.counts())
                self.count.update_many(groups, counts.tolist())
                return {"key": groups.first("key"), "count": counts}
    """

    @abstractmethod
    def process_groups(self, groups: GroupedRows, ctx: KeyedContext) -> Any:
        """Process a batch of rows grouped by key (``runtime.grouped_rows``). A key occurs once per
        call; a key with rows in several input batches may be called in several calls, in order.
        There is no current key (``ctx.set_current_key`` sets one for per-key state and timers).
        Return the output as columns (a ``pyarrow.RecordBatch`` or ``Table``, or a dict of column
        name to array or list), or as rows like the other functions, or None."""


class KeyedCoProcessFunction(KeyedFunction):
    """Processes two keyed inputs (Flink's ``KeyedCoProcessFunction``): the rows of both, keyed
    alike, share the key's state and timers. One instance per subtask.

    ::

        class UnpaidOrders(KeyedCoProcessFunction):
            def open(self, ctx):
                self.paid = ctx.get_state(ValueStateDescriptor("paid", default=False))

            def process_left(self, order, ctx):     # an order: alert in 15 minutes unless paid
                ctx.timer_service().register_event_time_timer(order["ts"] + 15 * 60_000)

            def process_right(self, payment, ctx):
                self.paid.update(True)

            def on_timer(self, timestamp, ctx):
                if not self.paid.value():
                    yield (ctx.current_key, "unpaid")
    """

    @abstractmethod
    def process_left(self, row: Any, ctx: KeyedContext) -> Iterable[Any] | None:
        """Process one row of the first input, of ``ctx.current_key``; return or yield output rows."""

    @abstractmethod
    def process_right(self, row: Any, ctx: KeyedContext) -> Iterable[Any] | None:
        """Process one row of the second input, of ``ctx.current_key``; return or yield output rows."""


class KeyedBroadcastProcessFunction(KeyedFunction):
    """The broadcast state pattern (Flink's ``KeyedBroadcastProcessFunction``): a keyed input,
    and a broadcast input whose rows reach every subtask. ``process_broadcast`` keeps what they
    say in broadcast state (``ctx.broadcast_state``, a map the same on every subtask, checkpointed
    and copied on rescale); ``process`` reads it while it processes the keyed rows. Within an
    epoch every subtask processes the epoch's broadcast rows first, in the same order, then its
    keyed rows. One instance per subtask.

    ::

        THRESHOLDS = MapStateDescriptor("thresholds")

        class Alerts(KeyedBroadcastProcessFunction):
            def process_broadcast(self, rule, ctx):
                ctx.broadcast_state(THRESHOLDS).put(rule["sensor_type"], rule["limit"])

            def process(self, reading, ctx):
                limit = ctx.broadcast_state(THRESHOLDS).get(reading["sensor_type"])
                if limit is not None and reading["value"] > limit:
                    yield (reading["sensor"], reading["value"])
    """

    @abstractmethod
    def process(self, row: Any, ctx: KeyedContext) -> Iterable[Any] | None:
        """Process one keyed row of ``ctx.current_key``; broadcast state is read-only here."""

    @abstractmethod
    def process_broadcast(self, row: Any, ctx: BroadcastContext) -> Iterable[Any] | None:
        """Process one broadcast row, on every subtask: change broadcast state the same way on each
        (nothing random, no wall clock). Output rows come from every subtask, once per subtask."""


class BroadcastContext:
    """Handed to ``process_broadcast``: broadcast state to change, keyed state of every key, and
    where the function runs. No key is current."""

    def __init__(self, keyed: KeyedContext) -> None:
        self._keyed = keyed
        self.subtask_index, self.parallelism = keyed.subtask_index, keyed.parallelism
        self.max_parallelism, self.job_id = keyed.max_parallelism, keyed.job_id
        self.checkpoint_id, self.time = keyed.checkpoint_id, keyed.time

    def broadcast_state(self, descriptor: MapStateDescriptor[K, V]) -> BroadcastState[K, V]:
        """The broadcast state of ``descriptor``, to read and change."""
        return self._keyed._broadcast_state(descriptor)

    def apply_to_keyed_state(self, descriptor: StateDescriptor, function: Callable[[Any, State], None]) -> None:
        """Call ``function(key, state)`` for every key of this subtask that has state
        ``descriptor`` (Flink's ``applyToKeyedState``), the key current during the call, so the
        function may read, change or clear that key's state (this one's and others')."""
        backend = self._keyed._backend
        found = backend.keys_and_key_groups(descriptor.name)
        if found is None:
            raise ConfigurationError(f"{type(backend).__name__} does not list keys with their key groups "
                                     f"(KeyedStateBackend.keys_and_key_groups), which apply_to_keyed_state needs: "
                                     f"implement it in the backend")
        state = backend.get_state(descriptor)
        for key, key_group in list(found):  # listed first: the function may change what a scan would see
            backend.set_current_key(key, key_group)
            function(key, state)


class ReadOnlyBroadcastState(BroadcastState[K, V]):
    """Broadcast state while keyed rows are processed: the rows of one subtask must not change
    what every subtask keeps the same."""

    def __init__(self, state: BroadcastState[K, V]) -> None:
        self._state = state

    def get(self, key: K) -> V | None:
        return self._state.get(key)

    def contains(self, key: K) -> bool:
        return self._state.contains(key)

    def items(self) -> Iterator[tuple[K, V]]:
        return self._state.items()

    def put(self, key: K, value: V) -> None:
        self._refuse("put")

    def remove(self, key: K) -> None:
        self._refuse("remove")

    def clear(self) -> None:
        self._refuse("clear")

    @staticmethod
    def _refuse(method: str) -> None:
        raise StateAccessError(f"broadcast state is read-only while keyed rows are processed ({method}): change it "
                               f"in process_broadcast, which every subtask runs alike")


#: what a task runs: one call per row, one call per key and batch of rows, or one call per batch;
#: per row of either of two inputs; per keyed row after every broadcast row
ProcessFunction = Union[KeyedProcessFunction, KeyedBatchFunction, KeyedVectorFunction, KeyedCoProcessFunction,
                        KeyedBroadcastProcessFunction]
#: the function kinds of one keyed input, and every kind
ONE_INPUT_KINDS = (KeyedProcessFunction, KeyedBatchFunction, KeyedVectorFunction)
FUNCTION_KINDS = (*ONE_INPUT_KINDS, KeyedCoProcessFunction, KeyedBroadcastProcessFunction)


class Calls(Enum):
    """How the engines call a function."""

    GROUPS = "process_groups"  # a KeyedVectorFunction: once per batch grouped by key
    KEY_RUNS = "process_rows"  # a KeyedBatchFunction: once per key and batch of rows
    ROWS = "process"  # a KeyedProcessFunction (and the keyed rows of a broadcast function): once per row
    SIDE_ROWS = "process_left/process_right"  # a KeyedCoProcessFunction: once per row of either input


def calls_of(function: ProcessFunction) -> Calls:
    """How ``function`` is called, the same on every engine. A function of several kinds (a
    ``KeyedVectorFunction`` that subclasses a ``KeyedProcessFunction`` to reuse its ``open``, say)
    gets the most batched calls of its kinds; one that ``processes_groups`` is called per batch."""
    if isinstance(function, KeyedVectorFunction) or function.processes_groups:
        return Calls.GROUPS
    if isinstance(function, KeyedBatchFunction):
        return Calls.KEY_RUNS
    if isinstance(function, KeyedCoProcessFunction):
        return Calls.SIDE_ROWS
    return Calls.ROWS


#: the entry points of each function kind, named in errors
_ENTRY_POINTS = {KeyedCoProcessFunction: "two inputs: process_connected(left, right, ...) (LocalRunner.run_epoch("
                                         "left=..., right=...))",
                 KeyedBroadcastProcessFunction: "a keyed and a broadcast input: process_broadcast(df, broadcast, "
                                                "...) (LocalRunner.run_epoch(rows, broadcast=...))"}


def check_function(function: object, kinds: tuple[type, ...] = ONE_INPUT_KINDS) -> None:
    """A ``ConfigurationError`` unless ``function`` is an instance of one of ``kinds``, the
    function kinds the caller runs (by default those of one keyed input)."""
    if isinstance(function, kinds):
        return
    for kind, entry in _ENTRY_POINTS.items():
        if isinstance(function, kind):
            raise ConfigurationError(f"{type(function).__name__} is a {kind.__name__}, which takes {entry}")
    names = ", ".join(k.__name__ for k in kinds)
    kind_of = "a class: pass an instance" if isinstance(function, type) else f"a {type(function).__name__}"
    raise ConfigurationError(f"the function must be an instance of {names}, got {function!r} ({kind_of}); subclass "
                             f"one of them and implement its methods (process, process_rows, process_groups, ...)")


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

    def timer_service(self, *args: Any, **kwargs: Any) -> TimerService:
        """Refused, as Flink's ``FunctionInitializationContext`` has none: a timer belongs to a key,
        and ``initialize_state`` runs before any key is current."""
        raise ConfigurationError("ctx.timer_service() in initialize_state: a timer belongs to a key, and no key is "
                                 "current while operator state is initialized; register timers in process or "
                                 "on_timer (their ctx.timer_service()), where the row's key is current")


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
