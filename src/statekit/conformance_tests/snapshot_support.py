"""What the snapshot, incremental and rescale levels share: the states they fill and read back,
snapshot modes, and ``OnFilesystemStorage``, the mixin that writes snapshots as files."""
from __future__ import annotations

from typing import Any

import pytest

from statekit.conformance_tests.base import BackendTestBase, open_keyed_backend, requires, set_key
from statekit.conformance_tests.compare import assert_same_state
from statekit.conformance_tests.workload import COUNT, LAST, MAXIMUM, MEAN, SUMS, Row
from statekit.spi import (
    KeyedStateBackend, SnapshotFormat, SnapshotOptions, SnapshotType, StateBackend, key_group_for_key,
)
from statekit.spi.storage import CheckpointStorage, CheckpointStreams
from statekit.storage.inline import InlineStreams


MAX_P = 128
INCREMENTAL = SnapshotOptions(incremental=True)


def fill_states(backend: KeyedStateBackend, keys: range, base: int = 0) -> dict[str, Any]:
    """Write every state kind for ``keys``; return the expected contents."""
    count, last, sums = backend.get_state(COUNT), backend.get_state(LAST), backend.get_state(SUMS)
    expected: dict[str, Any] = {}
    for k in keys:
        key = f"key-{k}"
        set_key(backend, key)
        count.update(base + k)
        last.update([k, k + 1, base])
        sums.put_all({"a": k, "b": base})
        expected[key] = (base + k, [k, k + 1, base], {"a": k, "b": base})
    return expected


def records_of(rows: list[Row]) -> list[tuple[Any, int, Row]]:
    """Workload rows as a task processes them: (key, key group, row)."""
    return [(row[0], key_group_for_key(row[0], MAX_P), row) for row in rows]


def read_states(backend: KeyedStateBackend) -> dict[str, Any]:
    count, last, sums = backend.get_state(COUNT), backend.get_state(LAST), backend.get_state(SUMS)
    found: dict[str, Any] = {}
    for key in sorted(backend.keys(COUNT.name)):
        set_key(backend, key)
        found[key] = (count.value(), last.get(), dict(sums.items()))
    return found


def assert_restores(state_backend: StateBackend, directory: str, handles: list[Any], streams: CheckpointStreams,
                    expected: dict[str, Any], context: str) -> None:
    """Restore ``handles`` into a new backend in ``directory``; fail with ``context`` unless it holds
    exactly ``expected`` (as ``read_states`` reads it)."""
    assert all(handle is not None for handle in handles), f"{context}: a snapshot of state wrote no handle"
    restored = open_keyed_backend(state_backend, directory, restore_handles=handles, restore_streams=streams)
    try:
        assert_same_state(read_states(restored), expected, context)
    finally:
        restored.dispose()


SNAPSHOT_MODES = ["full", "incremental", "native"]


def snapshot_options_for(mode: str, state_backend: StateBackend) -> SnapshotOptions:
    """Options of a snapshot mode: a full canonical checkpoint, an incremental one, a full native
    one; the last two need their capability (else the test skips)."""
    if mode == "incremental":
        requires(state_backend, "incremental_snapshots")
    if mode == "native":
        requires(state_backend, "native_snapshots")
    return SnapshotOptions(incremental=mode == "incremental",
                           format=SnapshotFormat.NATIVE if mode == "native" else SnapshotFormat.CANONICAL)


#: what a job takes of a backend it restored: a savepoint (canonical), or a checkpoint of a snapshot mode
NEXT_SNAPSHOTS = ["savepoint", *SNAPSHOT_MODES]


def next_snapshot_options(kind: str, state_backend: StateBackend) -> SnapshotOptions:
    """Options of a ``NEXT_SNAPSHOTS`` kind: a savepoint, else as ``snapshot_options_for``."""
    if kind == "savepoint":
        return SnapshotOptions(SnapshotType.SAVEPOINT)
    return snapshot_options_for(kind, state_backend)


def mutate_everything(backend: KeyedStateBackend, salt: int = 0) -> None:
    count, last, sums = backend.get_state(COUNT), backend.get_state(LAST), backend.get_state(SUMS)
    mean, maximum = backend.get_state(MEAN), backend.get_state(MAXIMUM)
    for k in range(0, 3000, 3):
        set_key(backend, f"key-{k}")
        count.update(-1 - salt)
        last.add(-7)
        sums.put("a", -1)
        sums.remove("b")
        mean.add(1000 + salt)
        maximum.add(10 ** 6)
    for k in range(1, 3000, 3):
        set_key(backend, f"key-{k}")
        count.clear()
        last.clear()
        sums.clear()
    for k in range(5000, 5100):
        set_key(backend, f"key-{k}")
        count.update(k)


class OnFilesystemStorage:
    """Mix in before ``SnapshotRestoreTests``/``RescaleTests`` to write snapshots as files (local
    ``filesystem`` storage, small inline threshold) instead of inline bytes."""

    @pytest.fixture
    def snapshot_streams(self, tmp_path: Any) -> CheckpointStreams:
        return small_threshold_files(str(tmp_path / "snapshots")).create_access("conformance-job").streams(1, "op-0")

    @pytest.fixture
    def checkpoint_storage(self, tmp_path: Any) -> CheckpointStorage:
        return small_threshold_files(str(tmp_path / "checkpoints"))


def small_threshold_files(directory: str) -> CheckpointStorage:
    """The ``filesystem`` storage at ``directory``, every stream above 1 KiB a file."""
    from statekit.registry import storage_class

    return storage_class("filesystem").from_settings(directory, {"memory-threshold": "1024"})


class SnapshotTestBase(BackendTestBase):
    """The fixtures of the snapshot level's round trips, and restoring a backend from handles."""

    @pytest.fixture(params=SNAPSHOT_MODES)
    def snapshot_options(self, request: Any, state_backend: StateBackend) -> SnapshotOptions:
        """Every round trip runs with full and (where declared) incremental and native snapshots."""
        return snapshot_options_for(request.param, state_backend)

    @pytest.fixture
    def snapshot_streams(self) -> CheckpointStreams:
        """Where snapshots are written and read; inline bytes by default."""
        return InlineStreams()

    def _restore(self, state_backend: StateBackend, tmp_path: Any, handles: list[Any],
                 streams: CheckpointStreams, name: str = "restored", **kwargs: Any) -> KeyedStateBackend:
        return open_keyed_backend(state_backend, str(tmp_path / name), restore_handles=handles,
                                  restore_streams=streams, **kwargs)
