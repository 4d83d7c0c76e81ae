"""RocksDB specifics: incremental checkpoints upload only new SST files, retention deletes
unreferenced shared files and never a referenced one, options are validated, the LOCK is exclusive."""
import os
import random
import subprocess
import sys

import pytest

from statekit.backends.rocksdb import IncrementalRocksDBStateHandle, RocksDBStateBackend
from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.store import CheckpointStore
from statekit.conformance_tests.base import open_keyed_backend, set_key
from statekit.serializers import BytesSerializer
from statekit.spi import (
    ConfigurationError, KeyBatch, KeyGroupRange, SnapshotFormat, SnapshotOptions, StatekitError, ValueStateDescriptor,
    key_group_for_key,
)
from statekit.storage.filesystem import FileSystemCheckpointStorage

INCREMENTAL = SnapshotOptions(incremental=True)
NATIVE_FULL = SnapshotOptions(format=SnapshotFormat.NATIVE)
VALUE = ValueStateDescriptor("value", BytesSerializer())


def _write_keys(backend, keys, version):
    state = backend.get_state(VALUE)
    for k in keys:
        set_key(backend, f"key-{k:08d}")
        state.update(os.urandom(60) + version.to_bytes(4, "big"))


class Checkpointer:
    """Drives checkpoints of one backend through the filesystem storage and a CheckpointStore."""

    def __init__(self, backend, tmp_path, num_retained):
        storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
        self.access = storage.create_access("job")
        self.store = CheckpointStore(self.access, num_retained)
        self.backend = backend

    def checkpoint(self, checkpoint_id, options=INCREMENTAL):
        streams = self.access.streams(checkpoint_id, "op-0")
        handle = self.backend.snapshot(checkpoint_id, options).write(streams)
        assert isinstance(handle, IncrementalRocksDBStateHandle)
        operator = OperatorState("op", 1, 128, (SubtaskState((handle,)),))
        self.store.add(CheckpointMetadata(checkpoint_id, "job", {"op": operator}))
        self.backend.notify_checkpoint_complete(checkpoint_id)
        return handle

    def shared_files_on_disk(self):
        directory = os.path.join(self.access.job_root, "shared")
        return set(os.listdir(directory)) if os.path.isdir(directory) else set()

    def shared_files_referenced(self):
        return {os.path.basename(h.path) for c in self.store.completed()
                for s in c.metadata.operators["op"].subtasks for k in s.keyed for h in k.shared.values()}


def _compact(backend):
    """Flush the backend's writes and compact every state's column family into new SST files."""
    backend._flush()
    for column_family in backend._column_families.values():
        column_family.compact_range(None, None)


def _uploaded_bytes(handle, previous):
    reused_paths = {h.path for h in previous.shared.values()} if previous else set()
    return sum(h.size for h in handle.shared.values() if h.path not in reused_paths) + \
        sum(h.size for h in handle.private.values())


@pytest.fixture
def rocksdb(tmp_path):
    backend = open_keyed_backend(RocksDBStateBackend(**{"write-buffer-size": "8m"}), str(tmp_path / "local"))
    yield backend
    backend.dispose()


def test_one_percent_churn_uploads_a_small_fraction(rocksdb, tmp_path):
    n = 100_000
    checkpointer = Checkpointer(rocksdb, tmp_path, num_retained=3)
    _write_keys(rocksdb, range(n), 1)
    first = checkpointer.checkpoint(1)
    first_bytes = _uploaded_bytes(first, None)
    assert first_bytes > n * 60, f"the first checkpoint must hold all state, uploaded {first_bytes} bytes"
    _write_keys(rocksdb, range(0, n, 100), 2)  # 1% of the keys
    second = checkpointer.checkpoint(2)
    second_bytes = _uploaded_bytes(second, first)
    assert second_bytes < 0.05 * first_bytes, (
        f"1% churn uploaded {second_bytes} bytes, {second_bytes / first_bytes:.1%} of the first checkpoint's "
        f"{first_bytes}: SST files confirmed by checkpoint 1 must be referenced, not uploaded again")
    reused = set(first.shared) & set(second.shared)
    assert reused and all(first.shared[name] == second.shared[name] for name in reused)


def test_unconfirmed_files_are_uploaded_again(rocksdb, tmp_path):
    """A checkpoint that never completed confirms nothing: the next one re-uploads its files."""
    checkpointer = Checkpointer(rocksdb, tmp_path, num_retained=3)
    _write_keys(rocksdb, range(20_000), 1)
    streams = checkpointer.access.streams(1, "op-0")
    aborted = rocksdb.snapshot(1, INCREMENTAL).write(streams)
    rocksdb.notify_checkpoint_aborted(1)
    second = checkpointer.checkpoint(2)
    assert not {h.path for h in aborted.shared.values()} & {h.path for h in second.shared.values()}


def test_retention_deletes_unreferenced_sst_files_only(rocksdb, tmp_path):
    checkpointer = Checkpointer(rocksdb, tmp_path, num_retained=2)
    n = 30_000
    _write_keys(rocksdb, range(n), 0)
    for checkpoint_id in range(1, 8):
        _write_keys(rocksdb, range(checkpoint_id, n, 7), checkpoint_id)
        if checkpoint_id % 3 == 0:
            _compact(rocksdb)  # compaction makes old SST files unreferenced
        checkpointer.checkpoint(checkpoint_id)
        on_disk = checkpointer.shared_files_on_disk()
        referenced = checkpointer.shared_files_referenced()
        assert referenced <= on_disk, f"checkpoint {checkpoint_id}: referenced shared files were deleted: " \
                                      f"{sorted(referenced - on_disk)[:3]}"
        assert on_disk == referenced, f"checkpoint {checkpoint_id}: unreferenced shared files were kept: " \
                                      f"{sorted(on_disk - referenced)[:3]}"
    assert [c.checkpoint_id for c in checkpointer.store.completed()] == [6, 7]
    # a coordinator restart rebuilds the registry from the retained _metadata and keeps deleting correctly
    restarted = CheckpointStore(checkpointer.access, 2)
    checkpointer.store = restarted
    _write_keys(rocksdb, range(n), 99)
    _compact(rocksdb)
    checkpointer.checkpoint(8)
    checkpointer.checkpoint(9)
    assert checkpointer.shared_files_on_disk() == checkpointer.shared_files_referenced()


def test_a_native_full_checkpoint_stands_alone(rocksdb, tmp_path):
    """A full checkpoint in RocksDB's format holds its own copy of every file, exclusive to it: the
    incremental checkpoint after it shares none of them, and once retention deleted it, the
    incremental one still restores every key."""
    checkpointer = Checkpointer(rocksdb, tmp_path, num_retained=1)
    _write_keys(rocksdb, range(20_000), 1)
    first = checkpointer.checkpoint(1)  # incremental: confirms its SST files
    full = checkpointer.checkpoint(2, NATIVE_FULL)
    assert full.shared == {} and any(name.endswith(".sst") for name in full.private), \
        f"a native full checkpoint must hold its SST files as its own: shared {sorted(full.shared)}"
    full_files = [h.path for name, h in full.private.items() if name.endswith(".sst")]
    assert not set(full_files) & {h.path for h in first.shared.values()}
    _write_keys(rocksdb, range(0, 20_000, 10), 3)
    third = checkpointer.checkpoint(3)  # incremental, after the full one: uploads its files anew
    assert {h.path for h in third.shared.values()}.isdisjoint(h.path for h in first.shared.values())
    assert not any(os.path.exists(os.path.join(checkpointer.access.job_root, path)) for path in full_files), \
        "retention must delete the native full checkpoint's files with it"
    restored = open_keyed_backend(RocksDBStateBackend(), str(tmp_path / "restored"), restore_handles=[third],
                                  restore_streams=checkpointer.access.restore_streams())
    try:
        state = restored.get_state(VALUE)
        found = 0
        for k in range(20_000):
            set_key(restored, f"key-{k:08d}")
            found += state.value() is not None
        assert found == 20_000
    finally:
        restored.dispose()


def test_native_checkpoint_files_are_the_live_ssts_linked_and_survive_compaction(rocksdb, tmp_path):
    """On the same local file system a native checkpoint stores each SST file by renaming the hard
    link RocksDB's checkpoint made (no byte copied): the stored file is a live one's inode. The live
    instance then overwrites every key and compacts, deleting those SST files; the checkpoints'
    files keep their checksums and restore the old values."""
    def live_inodes():
        return {os.stat(path).st_ino for path in (tmp_path / "local").rglob("*.sst")}

    checkpointer = Checkpointer(rocksdb, tmp_path, num_retained=2)
    keys = range(20_000)
    _write_keys(rocksdb, keys, 1)
    stored = []
    for checkpoint_id, options in ((1, NATIVE_FULL), (2, INCREMENTAL)):
        handle = checkpointer.checkpoint(checkpoint_id, options)
        paths = [os.path.join(checkpointer.access.job_root, h.path)
                 for name, h in (*handle.shared.items(), *handle.private.items()) if name.endswith(".sst")]
        copied = [path for path in paths if os.stat(path).st_ino not in live_inodes()]
        assert paths and not copied, f"checkpoint {checkpoint_id}: SST files copied, not linked: {copied}"
        stored += paths
    _write_keys(rocksdb, keys, 2)
    _compact(rocksdb)
    assert not {os.stat(path).st_ino for path in stored} & live_inodes(), "compaction kept the old SST files"
    for completed in checkpointer.store.completed():
        (keyed,) = completed.metadata.operators["op"].subtasks[0].keyed
        restored = open_keyed_backend(RocksDBStateBackend(), str(tmp_path / f"restored-{completed.checkpoint_id}"),
                                      restore_handles=[keyed], restore_streams=checkpointer.access.restore_streams())
        try:
            state = restored.get_state(VALUE)
            versions = set()
            for k in keys:
                set_key(restored, f"key-{k:08d}")
                versions.add(int.from_bytes(state.value()[-4:], "big"))
            assert versions == {1}, f"checkpoint {completed.checkpoint_id} restored versions {versions}"
        finally:
            restored.dispose()


def test_incremental_restore_reads_back_every_key(rocksdb, tmp_path):
    checkpointer = Checkpointer(rocksdb, tmp_path, num_retained=2)
    _write_keys(rocksdb, range(5000), 1)
    checkpointer.checkpoint(1)
    state = rocksdb.get_state(VALUE)
    expected = {}
    for k in range(0, 5000, 10):
        set_key(rocksdb, f"key-{k:08d}")
        state.update(b"new-%d" % k)
    for k in range(5000):
        set_key(rocksdb, f"key-{k:08d}")
        expected[f"key-{k:08d}"] = state.value()
    assert _restored_values(checkpointer, checkpointer.checkpoint(2), tmp_path) == expected


def _restored_values(checkpointer, handle, tmp_path):
    """Every key's value of state ``VALUE`` in a new backend restored from ``handle``."""
    restored = open_keyed_backend(RocksDBStateBackend(), str(tmp_path / "restored"), restore_handles=[handle],
                                  restore_streams=checkpointer.access.restore_streams())
    try:
        state = restored.get_state(VALUE)
        got = {}
        for key in restored.keys("value"):
            set_key(restored, key)
            got[key] = state.value()
        return got
    finally:
        restored.dispose()


def test_writes_held_back_are_read_by_every_path(rocksdb, tmp_path):
    """Puts and deletes wait in a table's ``pending`` until a write batch takes them: a point read,
    a range scan (keys, map entries, emptiness), a bulk read and a snapshot taken at once all see
    them, and more than ``WRITE_BEHIND_BYTES`` of them are written without waiting for a read."""
    from statekit.backends.rocksdb.table import WRITE_BEHIND_BYTES
    from statekit.serializers import StringSerializer
    from statekit.spi import MapStateDescriptor

    value, entries = rocksdb.get_state(VALUE), rocksdb.get_state(MapStateDescriptor("m", StringSerializer(), BytesSerializer()))
    for k in range(10):
        set_key(rocksdb, f"key-{k}")
        value.update(b"v%d" % k)
        entries.put("a", b"x")
    assert rocksdb._tables["value"].pending, "the puts wait (else this test tests nothing)"
    set_key(rocksdb, "key-3")
    value.clear()
    entries.remove("a")
    assert value.value() is None and entries.is_empty()
    assert sorted(rocksdb.keys("value")) == sorted(f"key-{k}" for k in range(10) if k != 3)
    set_key(rocksdb, "key-4")
    entries.put("b", b"y")
    assert dict(entries.items()) == {"a": b"x", "b": b"y"}
    value.update(b"late")
    bulk = rocksdb.get_bulk_state(VALUE)
    assert bulk.get_many(KeyBatch(["key-4", "key-5"], [key_group_for_key(k, 128) for k in ("key-4", "key-5")])) \
        == [b"late", b"v5"]
    checkpointer = Checkpointer(rocksdb, tmp_path, num_retained=1)
    assert _restored_values(checkpointer, checkpointer.checkpoint(1), tmp_path) == {
        f"key-{k}": b"late" if k == 4 else b"v%d" % k for k in range(10) if k != 3}
    big = b"z" * (64 << 10)
    for k in range(2 * WRITE_BEHIND_BYTES // len(big)):
        set_key(rocksdb, f"big-{k}")
        value.update(big)
    assert len(rocksdb._tables["value"].pending) < WRITE_BEHIND_BYTES // len(big)


@pytest.mark.parametrize("options,setting", [
    ({"block-cache-size": "lots"}, "block-cache-size"),
    ({"compression": "brotli"}, "compression"),
    ({"max-write-buffer-number": "0"}, "max-write-buffer-number"),
    ({"no-such-option": "1"}, "no-such-option"),
])
def test_bad_options_name_the_setting(options, setting):
    with pytest.raises(ConfigurationError, match=f"spark.statekit.backend.rocksdb.{setting}"):
        RocksDBStateBackend(**options)


def test_second_opener_gets_a_clear_error(rocksdb):
    """RocksDB's LOCK is exclusive: another process opening the same instance is refused."""
    code = ("import sys; from rocksdict import Rdict, Options; "
            "o = Options(raw_mode=True); o.create_if_missing(True)\n"
            "try:\n    Rdict(sys.argv[1], o)\nexcept Exception as e:\n    print('refused', e); sys.exit(3)\n")
    result = subprocess.run([sys.executable, "-c", code, rocksdb.db_dir], capture_output=True, text=True)
    assert result.returncode == 3 and "lock" in result.stdout.lower(), result.stdout + result.stderr
    with pytest.raises(StatekitError, match="LOCK is held"):
        rocksdb._open(rocksdb.db_dir, [])


def test_dispose_releases_the_lock_and_files(tmp_path):
    backend = open_keyed_backend(RocksDBStateBackend(), str(tmp_path / "local"))
    _write_keys(backend, range(100), 1)
    instance = backend.instance_dir
    backend.dispose()
    assert not os.path.exists(instance)


def test_block_cache_is_shared_per_process():
    a = RocksDBStateBackend(**{"block-cache-size": "32m"}).rocksdb_options
    b = RocksDBStateBackend(**{"block-cache-size": "32m"}).rocksdb_options
    assert a.shared_cache() is b.shared_cache()


def test_no_claim_restore_makes_the_first_checkpoint_independent(tmp_path):
    """After restoring another job's incremental checkpoint, the new job's first checkpoint
    references none of its files, so the source can be deleted."""
    from statekit.conformance_tests.workload import WorkloadFunction, make_rows
    from statekit.runtime import LocalRunner
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    backend = RocksDBStateBackend(**{"local-dir": str(tmp_path / "local")})
    source = LocalRunner(WorkloadFunction(), lambda r: r[0], parallelism=2, max_parallelism=128,
                         state_backend=backend, storage=storage, job_id="source", incremental=True)
    source.run_epoch(make_rows(2000, 300, 1))
    source_paths = {h.path for s in source.latest_metadata().operators[source.operator_id].subtasks
                    for k in s.keyed for h in k.stream_handles() if hasattr(h, "path")}
    assert source_paths, "the source checkpoint must have files (SSTs above the inline threshold)"
    target = LocalRunner(WorkloadFunction(), lambda r: r[0], parallelism=2, max_parallelism=128,
                         state_backend=backend, storage=storage, job_id="target", incremental=True)
    target.restore_from(source.latest_metadata(), source.streams)
    target.run_epoch(make_rows(100, 300, 2))
    target_handles = [h for s in target.latest_metadata().operators[target.operator_id].subtasks
                      for k in s.keyed for h in k.stream_handles()]
    assert target_handles and not source_paths & {getattr(h, 'path', None) for h in target_handles}
    assert all(os.path.exists(os.path.join(target.storage.job_root, h.path)) for h in target_handles
               if hasattr(h, "path"))


def _file_digests(root):
    """Every file under ``root`` and a digest of its bytes."""
    import hashlib
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                found[os.path.join(directory, name)] = hashlib.sha256(f.read()).hexdigest()
    return found


def test_rescale_links_sst_files_and_never_changes_the_checkpoint(tmp_path):
    """5 -> 2: each new subtask takes the old subtask overlapping it most as its base (its SST files
    hard-linked from the checkpoint directory), clips it, and ingests the ranges of two others;
    the old checkpoints are incremental (the second reuses the first's SST files). Every key reads
    back, and after writes, a checkpoint, a full compaction and dispose, no stored file changed."""
    # no stream inline: every file of the checkpoints, private ones too, is a file that could be linked
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), **{"memory-threshold": "0"})
    access = storage.create_access("job")
    backend = RocksDBStateBackend(**{"local-dir": str(tmp_path / "local")})
    expected, handles = {}, []
    for index in range(5):
        old = open_keyed_backend(backend, str(tmp_path / "old"), subtask_index=index, parallelism=5)
        state = old.get_state(VALUE)
        keys = [k for k in (f"key-{i:06d}" for i in range(6000))
                if key_group_for_key(k, 128) in KeyGroupRange.of_subtask(128, 5, index)]
        for version, chosen in ((1, keys), (2, keys[::7])):
            for key in chosen:
                set_key(old, key)
                expected[key] = b"%d:%s" % (version, key.encode())
                state.update(expected[key])
            handle = old.snapshot(version, INCREMENTAL).write(access.streams(version, f"op-{index}"))
            old.notify_checkpoint_complete(version)
        assert set(handle.shared.values()) & set(handles[-1].shared.values() if handles else ()) == set()
        handles.append(handle)
        old.dispose()
    reused = [h for h in handles if len(h.shared) > 1]
    assert reused, "the second checkpoints must reference the first ones' SST files as well as their own"
    operator = OperatorState("op", 5, 128, tuple(SubtaskState((h,)) for h in handles))
    stored = _file_digests(access.job_root)
    for index in range(2):
        restore = assign(operator, index, 2).keyed
        assert len(restore) == 3, "each new subtask overlaps three old ones: one base, two ingested"
        new = open_keyed_backend(backend, str(tmp_path / "new"), subtask_index=index, parallelism=2,
                                 restore_handles=restore, restore_streams=access.restore_streams())
        try:
            base = max(restore, key=lambda h: len(h.key_group_range.intersection(new.key_group_range)))
            linked = [name for name, h in base.shared.items()
                      if os.path.samefile(os.path.join(new.db_dir, name), os.path.join(access.job_root, h.path))]
            assert linked, "the base's SST files must be hard links to the checkpoint's files"
            state = new.get_state(VALUE)
            got = {}
            for key in new.keys("value"):
                set_key(new, key)
                got[key] = state.value()
            assert got == {k: v for k, v in expected.items()
                           if key_group_for_key(k, 128) in new.key_group_range}
            for key in list(got)[::3]:
                set_key(new, key)
                state.update(b"changed")
            new.snapshot(10, INCREMENTAL).write(access.streams(10, f"new-{index}"))
            for column_family in new._column_families.values():
                column_family.compact_range(None, None)
        finally:
            new.dispose()
    after = _file_digests(access.job_root)
    assert {path: after.get(path) for path in stored} == stored, "a file of the old checkpoints changed"


@pytest.mark.parametrize("seed,key_count", [(0, 4), (1, 4), (0, 300), (1, 300)])
def test_a_chain_of_rescales_matches_a_model(tmp_path, seed, key_count):
    """Incremental checkpoints of rescaled instances (clipped with range tombstones, other ranges
    ingested) rescaled again: 4 -> 8 -> 3 -> 5 -> 1 -> 7 -> 2 -> 6 with 100 key groups (uneven
    ranges), random writes and clears, some checkpoints aborted, a state registered after two
    rescales, and (with 4 keys) empty subtasks on both sides. Each subtask lists exactly the model's
    keys of its range, with the model's values."""
    rnd = random.Random(seed)
    access = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), **{"memory-threshold": "0"}) \
        .create_access("job")
    backend = RocksDBStateBackend(**{"local-dir": str(tmp_path / "local")})
    late = ValueStateDescriptor("late", BytesSerializer())
    model: dict[str, dict[str, bytes]] = {"value": {}, "late": {}}
    handles, old_parallelism, checkpoint_id = None, 0, 0
    for round_, parallelism in enumerate([4, 8, 3, 5, 1, 7, 2, 6]):
        operator = OperatorState("op", old_parallelism, 100, tuple(SubtaskState(h) for h in handles or ()))
        subtasks = [open_keyed_backend(backend, str(tmp_path / "l"), subtask_index=i, parallelism=parallelism,
                                       max_parallelism=100, restore_streams=access.restore_streams(),
                                       restore_handles=assign(operator, i, parallelism).keyed if handles else ())
                    for i in range(parallelism)]
        try:
            names = ("value", "late") if round_ > 2 else ("value",)
            for subtask in subtasks:
                for name in names:
                    state = subtask.get_state(VALUE if name == "value" else late)
                    got = {}
                    for key in subtask.keys(name):
                        set_key(subtask, key)
                        got[key] = state.value()
                    assert got == {k: v for k, v in model[name].items()
                                   if key_group_for_key(k, 100) in subtask.key_group_range}, (round_, name)
            for _ in range(3):
                checkpoint_id += 1
                for _ in range(300):
                    key = f"k{rnd.randrange(key_count)}"
                    subtask = next(s for s in subtasks if key_group_for_key(key, 100) in s.key_group_range)
                    name = "late" if round_ >= 2 and rnd.random() < 0.3 else "value"
                    state = subtask.get_state(VALUE if name == "value" else late)
                    set_key(subtask, key)
                    if rnd.random() < 0.2:
                        state.clear()
                        model[name].pop(key, None)
                    else:
                        model[name][key] = b"%d:%d" % (checkpoint_id, rnd.randrange(1000))
                        state.update(model[name][key])
                handles = []
                for i, subtask in enumerate(subtasks):
                    handle = subtask.snapshot(checkpoint_id, INCREMENTAL).write(access.streams(checkpoint_id,
                                                                                             f"op-{i}"))
                    handles.append((handle,) if handle is not None else ())
                    if rnd.random() < 0.8:
                        subtask.notify_checkpoint_complete(checkpoint_id)
                    else:
                        subtask.notify_checkpoint_aborted(checkpoint_id)
        finally:
            for subtask in subtasks:
                subtask.dispose()
        old_parallelism = parallelism


def test_a_checkpoint_taken_while_another_is_in_flight_references_only_stored_files(tmp_path):
    """Checkpoint 2 is taken while 1 is pending (so it uploads its own copy of 1's SST file); 1
    completes, 3 is taken, 2 completes and retention (1) drops checkpoint 1 and the files only it
    referenced; then 3 completes. Every file 3 references must still be stored: 3 reused 1's
    copy before, as 2 was still in flight when 3 was taken, it uploads its own."""
    access = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), **{"memory-threshold": "0"}) \
        .create_access("job")
    store = CheckpointStore(access, 1)
    backend = open_keyed_backend(RocksDBStateBackend(**{"local-dir": str(tmp_path / "local")}), str(tmp_path / "l"))

    def complete(checkpoint_id, pending):
        handle = pending.write(access.streams(checkpoint_id, "op-0"))
        operator = OperatorState("op", 1, 128, (SubtaskState((handle,)),))
        store.add(CheckpointMetadata(checkpoint_id, "job", {"op": operator}))
        backend.notify_checkpoint_complete(checkpoint_id)
        return handle

    try:
        _write_keys(backend, range(200), 1)
        first = backend.snapshot(1, INCREMENTAL)
        _write_keys(backend, range(1000, 1200), 2)
        second = backend.snapshot(2, INCREMENTAL)
        complete(1, first)
        _write_keys(backend, range(2000, 2200), 3)
        third = backend.snapshot(3, INCREMENTAL)
        complete(2, second)
        handle = complete(3, third)
        assert all(os.path.exists(os.path.join(access.job_root, h.path)) for h in handle.shared.values())
    finally:
        backend.dispose()
