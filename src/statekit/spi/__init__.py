"""Contracts only: the interfaces every backend, storage and engine programs against.

Nothing here imports another part of statekit; everything else imports from here. One name is
re-exported on first use instead: ``SNAPSHOT_COMPRESSION_OPTION``, the ``snapshot-compression``
option of a backend's ``OptionSet``, defined beside the canonical format it configures (which
needs pyarrow, so importing it here would make ``import statekit.spi`` heavy).
"""
from statekit.spi.backend import (
    Capabilities, KeyedBackendParams, KeyedStateBackend, OperatorBackendParams,
    OperatorStateBackend, PendingSnapshot, SnapshotFormat, SnapshotOptions, SnapshotType, StateBackend, StateSize,
    SubtaskInfo, released_snapshot,
)
from statekit.spi.bulk_state import (
    BulkAggregatingState, BulkListState, BulkMapState, BulkReducingState, BulkState, BulkValueState, KeyBatch,
)
from statekit.spi.descriptors import (
    AggregateFunction, AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, StateDescriptor, StateKind, StateTtlConfig, TtlStateVisibility, TtlTimeCharacteristic,
    TtlUpdateType, ValueStateDescriptor,
)
from statekit.spi.errors import (
    CapabilityError, ConfigurationError, CorruptStateError, FunctionResultError, IncompatibleSerializerError,
    JobOwnershipError, RestoreError, SerializationError, SnapshotError, StateAccessError, StatekitError,
)
from statekit.spi.handles import (
    ByteRange, FileStateHandle, InlineStateHandle, KeyedStateHandle, KeyGroupsStateHandle,
    OperatorStateHandle, OperatorStateMode, StateHandle, StateMetaInfo, StreamStateHandle,
    StreamChecksum, checksum, register_handle, verify_checksum,
)
from statekit.spi.key_groups import (
    KeyGroupRange, canonical_key, default_max_parallelism, key_group_for_key, operator_index_for_key_group,
    spark_xxhash64,
)
from statekit.spi.names import check_job_id, check_operator_id
from statekit.spi.options import Option, OptionSet, OptionValues
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer
from statekit.spi.state import (
    AggregatingState, BroadcastState, ListState, MapState, ReducingState, State, ValueState,
    VOID_NAMESPACE,
)
from statekit.spi.storage import (
    CheckpointOutputStream, CheckpointStorage, CheckpointStorageAccess, CheckpointStreams,
    CompletedCheckpointPointer, ResolvedCheckpoint, SavepointTarget, StateScope,
)

#: names defined elsewhere in statekit, imported when first used (see the module's docstring)
_ON_FIRST_USE = {"SNAPSHOT_COMPRESSION_OPTION": "statekit.backends.common.canonical"}


def __getattr__(name: str) -> object:
    if name in _ON_FIRST_USE:
        import importlib

        return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [name for name in dir() if not name.startswith("_")] + sorted(_ON_FIRST_USE)
