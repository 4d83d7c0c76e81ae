"""A full executor-local disk under a disk-backed backend (a real ENOSPC: a 2 MiB tmpfs as the
local directory) is a WorkingStateError naming the directory, the setting that chooses it and the
fix, not rocksdict's bare ``Exception: IO error`` or LMDB's ``mdb_txn_commit: Input/output error``;
and the checkpoint storage keeps what completed before."""
from __future__ import annotations

import os

import pytest

from statekit import KeyedProcessFunction, ValueStateDescriptor
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.runtime import LocalRunner
from statekit.spi.errors import WorkingStateError
from statekit.storage.filesystem import FileSystemCheckpointStorage

from tmpfs import mounted_tmpfs


class Large(KeyedProcessFunction):
    """4 KB of incompressible state per key."""

    def open(self, ctx):
        self.value = ctx.get_state(ValueStateDescriptor("value"))

    def process(self, row, ctx):
        self.value.update(os.urandom(2000).hex())


@pytest.mark.parametrize("backend", [RocksDBStateBackend, LMDBStateBackend], ids=["rocksdb", "lmdb"])
def test_a_full_local_disk_names_the_directory_the_setting_and_the_fix(tmp_path, backend):
    with mounted_tmpfs(tmp_path / "local", size="2m") as local:
        runner = LocalRunner(Large(), key_selector=lambda r: r, state_backend=backend(), local_dir=str(local),
                             parallelism=1, storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints")))
        runner.run_epoch(list(range(10)))
        name = backend.name
        with pytest.raises(WorkingStateError, match=rf"the {name} backend cannot .* in {local}/.*the disk is full .*"
                                                    rf"spark\.statekit\.backend\.{name}\.local-dir, or spark\.statekit"
                                                    rf"\.local\.dir .*free space there, or point the setting at a "
                                                    rf"local disk with room"):
            runner.run_epoch(list(range(2000)))
        assert [c.checkpoint_id for c in runner.store.completed()] == [1]
