"""The public helpers for backend plugins: everything here (and ``statekit.spi``) is a stable
surface a plugin may import; the submodules of this package and the built-in backends are not.

A backend over an ordered byte key-value store (RocksDB-, LMDB-, SQLite-like) implements
``KVTable`` and ``KVView`` and subclasses ``KVKeyedStateBackend``, which provides the five state
kinds, key iteration, full snapshots in the canonical format, changelog incremental snapshots
(``ChangelogConfig``) and restore with rescaling. A backend with its own data structures (like the
heap backend) builds on the lower-level helpers instead: the key layout, state registration,
namespace encoding, the canonical snapshot writer/reader and the changelog tracker. Every backend
can use ``DefaultOperatorStateBackend`` for operator state. Options are declared with
``statekit.spi.options``. See ``docs/plugin-authors.md``.
"""
from statekit.backends.common.abstract_keyed import AbstractKeyedStateBackend
from statekit.backends.common.canonical import (
    CHANGELOG_FORMAT, FORMAT as CANONICAL_FORMAT, CanonicalSnapshotWriter, read_key_groups, state_runs,
)
from statekit.backends.common.changelog import (
    OP_DELETE, OP_PUT, ChangelogConfig, ChangelogStateHandle, ChangelogTracker, restore_chain, split_ops,
)
from statekit.backends.common.key_layout import (
    cell_key, decode_list, encode_list, key_group_bounds, key_group_prefix, prefix_upper_bound, read_varint,
    split_cell_key, varint,
)
from statekit.backends.common.kv_backend import KVKeyedStateBackend
from statekit.backends.common.kv_store import KVTable, KVView
from statekit.backends.common.local_dirs import LOCAL_DIR_OPTION, acquire_lock, instance_path, release_lock
from statekit.backends.common.namespaces import decode_namespace, encode_namespace
from statekit.backends.common.operator_state import DefaultOperatorStateBackend
from statekit.backends.common.registration import (
    RegisteredState, checked_list_elements, default_value, register,
)
from statekit.backends.common.ttl import TtlSerializer, expiry_deadlines, timestamp_of, ttl_state

__all__ = [
    # a backend over an ordered byte key-value store
    "KVTable", "KVView", "KVKeyedStateBackend", "ChangelogConfig",
    # a backend with its own data structures: the skeleton both the heap and the KV layer build on
    "AbstractKeyedStateBackend",
    # operator state, for any backend
    "DefaultOperatorStateBackend",
    # executor-local files: one instance directory per keyed backend, locked to one process; its option
    "instance_path", "acquire_lock", "release_lock", "LOCAL_DIR_OPTION",
    # the byte layout of keyed state (key_layout; docs/plugin-authors.md, "The key layout")
    "key_group_prefix", "cell_key", "split_cell_key", "key_group_bounds", "prefix_upper_bound",
    "encode_list", "decode_list", "varint", "read_varint",
    # state registration and namespaces, for backends with their own data structures
    "RegisteredState", "register", "checked_list_elements", "default_value", "encode_namespace",
    "decode_namespace",
    # snapshot formats: canonical (full, savepoints) and changelog (incremental)
    "CANONICAL_FORMAT", "CHANGELOG_FORMAT", "CanonicalSnapshotWriter", "read_key_groups", "state_runs",
    "ChangelogStateHandle", "ChangelogTracker", "restore_chain", "split_ops", "OP_PUT", "OP_DELETE",
    # state time-to-live, for any backend
    "ttl_state", "TtlSerializer", "expiry_deadlines", "timestamp_of",
]
