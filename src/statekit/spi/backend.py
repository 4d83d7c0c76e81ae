"""State backend contracts (Flink's ``StateBackend`` / ``KeyedStateBackend`` split).

``StateBackend`` is a lightweight, picklable factory that holds configuration only. On a
worker it creates a ``KeyedStateBackend`` for one key-group range of one subtask and an
``OperatorStateBackend`` for the subtask, restoring them from handles.

Snapshots have two phases: ``snapshot()`` is the synchronous part and returns quickly with a
``PendingSnapshot`` holding a consistent view; ``PendingSnapshot.write()`` is the asynchronous
part that writes bytes and returns a handle. Writes made after ``snapshot()`` returned never
appear in what ``write()`` writes.
"""
from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Iterator, Sequence

from statekit.spi.bulk_state import BulkState, per_key_bulk_state
from statekit.spi.descriptors import StateDescriptor
from statekit.spi.errors import SnapshotError
from statekit.spi.handles import KeyedStateHandle, OperatorStateHandle, StateHandle
from statekit.spi.key_format import KeyBytes
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import BroadcastState, ListState, State, VOID_NAMESPACE
from statekit.spi.storage import CheckpointStreams
from statekit.spi.timers import MIN_TIMESTAMP, TimerQueue


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports beyond the required contract. Tests that need a capability
    the backend does not declare are skipped with the reason; required behaviour cannot be
    declared away."""

    incremental_snapshots: bool = False
    async_snapshots: bool = True
    ttl: bool = False
    out_of_core: bool = False  # state may exceed memory
    #: the working state survives ``dispose`` in ``KeyedBackendParams.working_dir`` and is reopened
    #: there with ``resume_local_state`` (local recovery without reading checkpoint storage)
    local_recovery: bool = False
    #: full checkpoints in the backend's own format on request (``SnapshotFormat.NATIVE``)
    native_snapshots: bool = False
    #: TTL on event time (``TtlTimeCharacteristic.EVENT_TIME``): entries stamped with the element's
    #: event time and expired by the watermark (``KeyedStateBackend.set_watermark``); needs ``ttl``.
    #: Last, so that capabilities given by position keep their meaning
    event_time_ttl: bool = False

    def declared(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class StateSize:
    """The size of one keyed state in a backend (``KeyedStateBackend.state_sizes``).

    ``entries``: cells of value, list, reducing and aggregating state (one per key and namespace),
    entries of map state (one per user key), timers of timer state; expired TTL entries not yet
    removed count. ``bytes``: never exact; ``bytes_basis`` names how the backend measured them."""

    entries: int
    bytes: int
    #: whether ``entries`` is exact (else the store's estimate)
    entries_exact: bool
    #: how ``bytes`` were measured, in the backend's word (e.g. "sampled", "pages", "rocksdb-estimate")
    bytes_basis: str


class SnapshotType(str, enum.Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"  # always the canonical format, self-contained


class SnapshotFormat(str, enum.Enum):
    """The format of a full checkpoint (Flink's ``SavepointFormatType``): ``CANONICAL`` is read by
    every backend; ``NATIVE`` is the backend's own files (RocksDB's SST files, LMDB's environment), written at the speed
    of a file copy and read back by that backend only. Savepoints are always canonical."""

    CANONICAL = "canonical"
    NATIVE = "native"


@dataclass(frozen=True)
class SnapshotOptions:
    snapshot_type: SnapshotType = SnapshotType.CHECKPOINT
    incremental: bool = False  # honoured only with the incremental_snapshots capability
    #: of a full checkpoint; honoured only with the native_snapshots capability
    format: SnapshotFormat = SnapshotFormat.CANONICAL


class PendingSnapshot(ABC):
    """The consistent view taken by the synchronous part, waiting to be written."""

    @abstractmethod
    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        """The asynchronous part: write the view, return its handle (``None`` if empty).
        May run on another thread while the backend keeps processing. A keyed snapshot writes
        once: after ``write`` or ``release``, ``write`` raises ``released_snapshot()`` (never
        ``None``, which would read as a backend without state)."""

    def release(self) -> None:
        """Drop the view without writing it (the checkpoint was aborted)."""


def released_snapshot() -> SnapshotError:
    """The error of ``PendingSnapshot.write`` on a snapshot already written or released."""
    return SnapshotError("this pending snapshot was written or released (its checkpoint aborted) already: its "
                         "view is gone; take a new snapshot")


@dataclass(frozen=True)
class SubtaskInfo:
    job_id: str
    operator_id: str
    subtask_index: int
    parallelism: int
    max_parallelism: int

    @property
    def key_group_range(self) -> KeyGroupRange:
        return KeyGroupRange.of_subtask(self.max_parallelism, self.parallelism, self.subtask_index)

    @property
    def name(self) -> str:
        return f"{self.operator_id}-{self.subtask_index}"


@dataclass(frozen=True)
class KeyedBackendParams:
    subtask: SubtaskInfo
    key_serializer: TypeSerializer
    #: handles whose key-group range intersects this subtask's; only that part is restored
    restore_handles: Sequence[KeyedStateHandle] = ()
    #: how to read the restore handles' bytes (required when there are handles)
    restore_streams: CheckpointStreams | None = None
    #: executor-local directory under which backends that keep files make their instance directory
    local_dir: str | None = None
    #: an exact directory for the working state, used by this backend alone, whose files outlive
    #: ``dispose`` (local recovery; only backends declaring ``local_recovery`` get one)
    working_dir: str | None = None
    #: ``working_dir`` already holds exactly the state of ``restore_handles``: reopen it, and use
    #: the handles for bookkeeping only (which files the next incremental checkpoint may share)
    resume_local_state: bool = False
    #: may the next checkpoint reference files of the restored snapshot? False when restoring in
    #: no-claim mode, whose first checkpoint must not depend on the snapshot restored from
    share_restored_files: bool = True
    #: the key groups of keys as the engine computes them (``key_groups_for_keys`` with the job's
    #: key types), when it knows: a restore of snapshots indexed by key group (the canonical
    #: format) then checks that every key read belongs to the key group its index entry gives
    key_groups_of: Callable[[Sequence[Any]], Sequence[int]] | None = None

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.subtask.key_group_range


@dataclass(frozen=True)
class OperatorBackendParams:
    subtask: SubtaskInfo
    #: every operator-state handle of the restored checkpoint, indexed by old subtask
    restore_handles: Sequence[OperatorStateHandle | None] = ()
    restore_streams: CheckpointStreams | None = None


class KeyedStateBackend(ABC):
    """Keyed state of one key-group range. Not thread-safe: one task thread uses it; only a
    ``PendingSnapshot.write`` may run concurrently."""

    def __init__(self, params: KeyedBackendParams) -> None:
        self.params = params
        self.key_group_range = params.key_group_range
        self.max_parallelism = params.subtask.max_parallelism
        self.key_serializer = params.key_serializer
        #: the bytes keys are stored under: the key serializer in the key format of the state
        #: (``spi.key_format``: the current one for new state; a restore adopts the restored state's)
        self.key_bytes = KeyBytes(params.key_serializer)
        self._key: Any = None
        self._key_group = -1
        self._processing_time_ms: int | None = None
        self._watermark_ms = MIN_TIMESTAMP
        self._element_time_ms: int | None = None

    #: expired TTL entries that reads found and removed (cleanup on read) since the runtime last took
    #: the count, at the epoch's snapshot, for the metrics' ``ttl_removed``; the TTL states of
    #: ``backends.common.ttl`` count them, a backend with TTL states of its own adds its own
    ttl_removed_on_read = 0

    #: whether a registered state stamps its writes with the element's event time (event-time TTL):
    #: the runtime calls ``set_element_time`` per row only while this is true, off the per-row path otherwise
    uses_element_time = False

    # --- time
    def set_processing_time(self, timestamp_ms: int) -> None:
        """The processing time (epoch milliseconds) state sees until the next call: what TTL
        measures against. The runtime sets the epoch's recorded time before the epoch's first
        record, so a replayed epoch sees the same time."""
        self._processing_time_ms = int(timestamp_ms)

    @property
    def processing_time_ms(self) -> int:
        """The time set by ``set_processing_time``; the wall clock until it is first set."""
        if self._processing_time_ms is None:
            return int(time.time() * 1000)
        return self._processing_time_ms

    def set_watermark(self, timestamp_ms: int) -> None:
        """The watermark (epoch milliseconds) state sees until the next call: what event-time TTL
        measures against. The runtime sets the epoch's recorded watermark before the epoch's first
        record, and the largest timestamp when the input ends."""
        self._watermark_ms = int(timestamp_ms)

    @property
    def watermark_ms(self) -> int:
        """The time set by ``set_watermark``; ``spi.timers.MIN_TIMESTAMP`` until it is first set."""
        return self._watermark_ms

    def set_element_time(self, timestamp_ms: int | None) -> None:
        """The event time of what is processed now (a row, or a key's rows), None when it has none
        (a timer, a row without event time): event-time TTL stamps writes with it, never before the
        watermark (``event_write_time_ms``). The runtime sets it only while ``uses_element_time`` is true."""
        self._element_time_ms = timestamp_ms

    @property
    def event_write_time_ms(self) -> int:
        """The write time of an event-time TTL entry written now: the element's event time, never
        before the watermark (a late row's entry, or one written without an element time, is
        written at the watermark)."""
        element, watermark = self._element_time_ms, self._watermark_ms
        return watermark if element is None or element < watermark else element

    # --- current key
    @abstractmethod
    def set_current_key(self, key: Any, key_group: int) -> None:
        """Scope state accesses to ``key``, which belongs to ``key_group`` (in this range);
        implementations set ``_key`` and ``_key_group``."""

    @property
    def current_key(self) -> Any:
        return self._key

    @property
    def current_key_group(self) -> int:
        return self._key_group

    # --- states
    @abstractmethod
    def get_state(self, descriptor: StateDescriptor,
                  namespace_serializer: TypeSerializer | None = None) -> State:
        """Get or create the state of ``descriptor``; the same name returns the same state.
        Raises ``IncompatibleSerializerError`` if restored state was written by a serializer
        the descriptor's cannot read, and ``StateAccessError`` if the name is taken by a
        different kind."""

    def get_bulk_state(self, descriptor: StateDescriptor,
                       namespace_serializer: TypeSerializer | None = None) -> BulkState:
        """The state of ``descriptor`` read and written for many keys per call (``spi.bulk_state``):
        the same cells as ``get_state``'s. This default loops over the per-key API, over the object
        ``get_state`` returns: where that is the one object per name the contract asks for, the
        bulk state shares its current namespace, which the suite's
        ``test_bulk_namespaces_are_apart`` refuses. Override it (``AbstractKeyedStateBackend``
        does, with bulk states of its own or per-key state objects of their own)."""
        return per_key_bulk_state(self, self.get_state(descriptor, namespace_serializer))

    @abstractmethod
    def keys(self, state_name: str, namespace: Any = VOID_NAMESPACE) -> Iterator[Any]:
        """Every key that has state ``state_name`` in ``namespace``, in this range, as the keys were
        when the iteration began: state may be changed while iterating."""

    def keys_and_key_groups(self, state_name: str,
                            namespace: Any = VOID_NAMESPACE) -> Iterator[tuple[Any, int]] | None:
        """``keys`` with the key group each is kept in, as of this call (state may be changed while
        iterating): what ``apply_to_keyed_state`` of the broadcast pattern makes current key by
        key. None (this default): the backend does not say, and the broadcast pattern refuses."""
        return None

    @abstractmethod
    def state_names(self) -> list[str]:
        """Registered and restored state names."""

    # --- timers
    @abstractmethod
    def create_timer_queue(self, name: str, namespace_serializer: TypeSerializer | None = None) -> TimerQueue:
        """Get or create the timers kept as state ``name`` (kind ``timers``; the name starts with
        ``descriptors.TIMER_STATE_PREFIX``). ``namespace_serializer`` None: the one the state was
        registered or restored with, else the default. Timers restored from a snapshot are in the
        queue before the first call returns; they are part of every later snapshot."""

    # --- snapshots and lifecycle
    @abstractmethod
    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        """The synchronous part of a snapshot."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is durable (incremental backends confirm files)."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` will never complete."""

    def sweep_expired(self, max_seconds: float) -> int:
        """Remove entries whose TTL has expired, for at most about ``max_seconds`` (0: none),
        continuing where the previous sweep stopped; return how many were removed. The runtime
        calls it after each epoch's records. A backend that declares ``ttl`` implements it."""
        return 0

    def state_sizes(self) -> dict[str, StateSize] | None:
        """Each state's size now (``StateSize``), by state name, timer states included. The runtime
        asks once per snapshot, after its synchronous part, for the epoch's metrics: it must cost
        little (no scan of the whole state). None (this default): the backend does not say, and
        the metrics give the states' sizes as unknown."""
        return None

    @abstractmethod
    def dispose(self) -> None:
        """Release all resources (files stay for local recovery where a backend supports it)."""


class OperatorStateBackend(ABC):
    """Non-keyed state of one subtask."""

    @abstractmethod
    def get_list_state(self, name: str, serializer: TypeSerializer | None = None) -> ListState:
        """Elements are split round-robin among subtasks when the parallelism changes."""

    @abstractmethod
    def get_union_list_state(self, name: str, serializer: TypeSerializer | None = None) -> ListState:
        """On restore every subtask gets every element of every old subtask."""

    @abstractmethod
    def get_broadcast_state(self, name: str, key_serializer: TypeSerializer | None = None,
                            value_serializer: TypeSerializer | None = None) -> BroadcastState:
        """A map that is identical on every subtask and copied on rescale."""

    @property
    @abstractmethod
    def is_restored(self) -> bool: ...

    @abstractmethod
    def snapshot(self, checkpoint_id: int) -> PendingSnapshot: ...

    def dispose(self) -> None:
        pass


class StateBackend(ABC):
    """A picklable factory holding configuration only (no open files, no native handles).

    ``name`` is what ``spark.statekit.backend`` selects; options come from
    ``spark.statekit.backend.<name>.*`` as strings and are parsed by the constructor.
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: the backend's option for its working directory, set from ``spark.statekit.local.dir``
    #: unless ``spark.statekit.backend.<name>.<option>`` is given (None: it has none)
    local_dir_option: ClassVar[str | None] = None
    #: its native snapshots hold pickles (the heap's): a job that chooses that format
    #: (``spark.statekit.checkpoint.format=native``) trusts its checkpoints as pickle's users do
    native_snapshots_run_code: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        self.options = dict(options)

    @abstractmethod
    def create_keyed_backend(self, params: KeyedBackendParams) -> KeyedStateBackend: ...

    @abstractmethod
    def create_operator_backend(self, params: OperatorBackendParams) -> OperatorStateBackend: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options})"
