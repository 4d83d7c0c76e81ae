"""The storage scenarios of the issue, on file://, memory:// and s3:// (moto on 127.0.0.1):

* a checkpoint killed after its files but before its ``_metadata`` is ignored: restore picks
  the previous complete one and the state equals the oracle;
* on file://, a checkpoint's files, their directory entries and its ``_metadata`` are synced to
  the disk before the checkpoint counts as complete;
* flipped bytes in a state file of a completed checkpoint are a checksum error naming the file;
* a heap savepoint taken at parallelism 4, moved to another directory, restores at 3 and 7
  with identical state for every key;
* bad input (unknown storage, unknown URL scheme, unwritable directory) fails at start naming
  the setting; the jobmanager storage's size limit names its setting;
* no-claim restore from another job's checkpoint never deletes that checkpoint's files.
"""
from __future__ import annotations

import os
import posixpath
import shutil
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import fsspec
import pytest
from fsync_recorder import record_syncs

from statekit.backends.heap import HeapStateBackend
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.checkpoint.store import CheckpointStore, stream_handles
from statekit.conformance_tests.s3 import DEFAULT_BUCKET, moto_s3  # noqa: F401 (fixture)
from statekit.conformance_tests.storage import payload, write_stream
from statekit.conformance_tests.workload import dump_state as workload_dump
from statekit.conformance_tests.workload import (
    WorkloadFunction, expected_key_state, make_rows, oracle,
)
from statekit.registry import storage_class
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.savepoints import snapshot_as_savepoint, write_savepoint
from statekit.spi import (
    ConfigurationError, CorruptStateError, FileStateHandle, InlineStateHandle, KeyGroupsStateHandle,
    RestoreError, SnapshotError, StatekitError,
)
from statekit.spi.storage import CheckpointStreams, ResolvedCheckpoint, StateScope
from statekit.storage.filesystem import FileSystemCheckpointStorage
from statekit.storage.pointers import SavepointLocation, resolve
from statekit.storage.memory import JobManagerCheckpointStorage

MAX_P = 128
JOB = "scenario-job"


@dataclass
class Location:
    """A fresh directory on one file system, by URL and by fsspec path."""

    url: str
    storage_options: dict[str, Any]
    fs: fsspec.AbstractFileSystem
    root: str

    def storage(self, sub: str = "checkpoints") -> FileSystemCheckpointStorage:
        return FileSystemCheckpointStorage(self.url_of(sub), storage_options=self.storage_options)

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def url_of(self, *parts: str) -> str:
        return self.fs.unstrip_protocol(self.path(*parts))

    def files(self, *parts: str) -> dict[str, bytes]:
        """Every file under a directory, with its bytes."""
        return {p: self.fs.cat_file(p) for p in self.fs.find(self.path(*parts))}

    def move(self, source: str, target: str) -> None:
        """Move a directory tree (``shutil.move`` locally; copy + delete on other file systems)."""
        if "file" in self.fs.protocol or "local" in self.fs.protocol:
            os.makedirs(posixpath.dirname(target), exist_ok=True)
            shutil.move(source, target)
            return
        for path in self.fs.find(source):
            self.fs.cp_file(path, target + path[len(source):])
        self.fs.rm(source, recursive=True)


@pytest.fixture(params=["file", "memory", "s3"])
def location(request, tmp_path) -> Iterator[Location]:
    if request.param == "file":
        url, options = (tmp_path / "store").as_uri(), {}
    elif request.param == "memory":
        url, options = f"memory:///statekit-scenarios/{uuid.uuid4().hex}", {}
    else:
        url, options = f"s3://{DEFAULT_BUCKET}/{uuid.uuid4().hex}", request.getfixturevalue("moto_s3").storage_options
    fs, root = fsspec.core.url_to_fs(url, **options)
    yield Location(url, options, fs, root)
    if request.param == "memory" and fs.exists(root):
        fs.rm(root, recursive=True)


def _runner(storage: Any, tmp_path: Any, parallelism: int, **kwargs: Any) -> LocalRunner:
    kwargs.setdefault("job_id", JOB)
    return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=parallelism, max_parallelism=MAX_P,
                       storage=storage, local_dir=str(tmp_path / "local"), **kwargs)


def dump_state(metadata: CheckpointMetadata, streams: CheckpointStreams, parallelism: int,
               tmp_path: Any, operator_id: str = "keyed-process") -> dict[str, Any]:
    return workload_dump(metadata, streams, f"{tmp_path}/dump-{parallelism}", parallelism=parallelism,
                         operator_id=operator_id)


def assert_state_is_oracle(found: dict[str, Any], rows: list[Any], what: str) -> None:
    expected = {key: expected_key_state(s) for key, s in oracle(rows).items()}
    assert found.keys() == expected.keys(), (
        f"{what}: missing keys {sorted(expected.keys() - found.keys())[:5]}, "
        f"extra keys {sorted(found.keys() - expected.keys())[:5]}")
    wrong = [key for key in expected if found[key] != expected[key]]
    assert not wrong, f"{what}: {len(wrong)} keys differ from the oracle, e.g. {wrong[0]!r}: " \
                      f"{found[wrong[0]]} != {expected[wrong[0]]}"


def assert_restores_oracle(location: Location, tmp_path: Any, resolved: ResolvedCheckpoint, job_id: str,
                           epoch: list[Any], rows: list[Any], what: str) -> None:
    """A new job at parallelism 3, restored from ``resolved`` and then running ``epoch``, holds the
    oracle's state of ``rows``."""
    restored = _runner(location.storage("other"), tmp_path, parallelism=3, job_id=job_id)
    restored.restore_from(CheckpointMetadata.from_bytes(resolved.metadata), resolved.streams)
    restored.run_epoch(epoch)
    assert_state_is_oracle(dump_state(restored.latest_metadata(), restored.streams, 3, tmp_path), rows, what)


def file_streams(metadata: CheckpointMetadata) -> list[FileStateHandle]:
    """The keyed state files of a checkpoint (inline streams left out)."""
    return [h.stream for subtask in metadata.operator("keyed-process").subtasks for h in subtask.keyed
            if isinstance(h, KeyGroupsStateHandle) and isinstance(h.stream, FileStateHandle)]


class _Killed(BaseException):
    """The driver process dying (not an Exception: nothing may clean up after it)."""


# ---------------------------------------------------------------------------- killed checkpoint


def test_checkpoint_killed_before_metadata_restores_the_previous_one(location, tmp_path, monkeypatch):
    rows = [make_rows(3000, 1500, seed) for seed in (1, 2, 3)]
    storage = location.storage()
    runner = _runner(storage, tmp_path, parallelism=2)
    runner.run_epoch(rows[0])
    runner.run_epoch(rows[1])

    def die(checkpoint_id: int, metadata: bytes) -> None:
        raise _Killed(f"driver killed before writing _metadata of checkpoint {checkpoint_id}")

    monkeypatch.setattr(runner.storage, "commit", die)
    with pytest.raises(_Killed):
        runner.run_epoch(rows[2])  # every subtask wrote its files for chk-3; no _metadata
    chk3 = location.path("checkpoints", JOB, "chk-3")
    written = location.fs.find(chk3)
    assert written, f"the killed checkpoint wrote no files under {chk3}; the scenario needs some"
    assert not any(posixpath.basename(p) == "_metadata" for p in written), f"chk-3 has a _metadata: {written}"

    # a new driver: every way of finding the restore point skips the incomplete chk-3
    access = storage.create_access(JOB)
    latest = access.latest_completed()
    assert latest is not None and latest.checkpoint_id == 2, f"latest completed checkpoint is {latest}"
    before = CheckpointStore(access).latest_before(4)
    assert before is not None and before.checkpoint_id == 2, f"latest_before(4) is {before}"
    resolved = resolve(location.url_of("checkpoints", JOB), location.storage_options)
    assert resolved.pointer.checkpoint_id == 2, f"resolve(job dir) picked {resolved.pointer}"
    restarted = _runner(storage, tmp_path, parallelism=2)
    assert restarted.store.latest() is not None and restarted.store.latest().checkpoint_id == 2

    restarted.run_epoch(rows[2])  # epoch 3 again, restoring from chk-2
    assert [c.checkpoint_id for c in restarted.store.completed()] == [1, 2, 3]
    assert_state_is_oracle(dump_state(restarted.latest_metadata(), restarted.streams, 2, tmp_path),
                           rows[0] + rows[1] + rows[2], "after the replay of the killed epoch")

    # a new job restoring from the resolved job directory gets the same state at chk-2
    assert_restores_oracle(location, tmp_path, resolved, "from-resolved", rows[2], rows[0] + rows[1] + rows[2],
                           "a new job restored from resolve(job dir)")


def test_a_local_checkpoint_reaches_the_disk_before_it_counts_as_complete(tmp_path, monkeypatch):
    """On file://, every file a ``_metadata`` names is fsynced, with its directory entries up to
    directories that existed before (the checkpoint and savepoint directories are new here), before
    the rename that completes the checkpoint or savepoint; ``_metadata`` is synced before that
    rename and its directory after it. Without it an OS crash can keep the ``_metadata`` and lose
    the files, and retention may already have deleted the checkpoint before."""
    events = record_syncs(monkeypatch)

    def assert_durable_when_complete(directory: str, files: list[str], new_directories: list[str]) -> None:
        metadata_path = os.path.join(directory, "_metadata")
        completed = events.index(("rename", metadata_path))
        synced_before = {path for kind, path in events[:completed] if kind == "fsync"}
        assert files, "the scenario needs state files (above the memory threshold)"
        for path in files:
            missing = {path, os.path.dirname(path), os.path.dirname(os.path.dirname(path))} - synced_before
            assert not missing, f"{path} is named by _metadata but {sorted(missing)} were not synced before it"
        for new in new_directories:
            assert os.path.dirname(new) in synced_before, f"the entry of the new directory {new} was not synced"
        assert any(kind == "fsync" and path.startswith(metadata_path + ".inprogress-")
                   for kind, path in events[:completed]), f"{metadata_path} was renamed into place unsynced"
        assert ("fsync", directory) in events[completed:], f"the rename of {metadata_path} was not synced"

    base = os.path.realpath(tmp_path)
    storage = FileSystemCheckpointStorage((tmp_path / "new" / "store").as_uri())
    runner = _runner(storage, tmp_path, parallelism=2)
    runner.run_epoch(make_rows(3000, 1500, 1))
    job = os.path.join(base, "new", "store", JOB)
    assert_durable_when_complete(
        os.path.join(job, "chk-1"),
        [os.path.join(job, handle.path) for handle in file_streams(runner.latest_metadata())],
        [os.path.join(base, "new"), os.path.join(base, "new", "store"), job])

    del events[:]
    runner.savepoint((tmp_path / "new-savepoints" / "all").as_uri())
    savepoint = os.path.join(base, "new-savepoints", "all", f"savepoint-{JOB}-1")
    assert_durable_when_complete(savepoint, [os.path.join(savepoint, name) for name in os.listdir(savepoint)
                                             if name != "_metadata"],
                                 [os.path.join(base, "new-savepoints"), os.path.join(base, "new-savepoints", "all"),
                                  savepoint])

    # native snapshots store files with upload_file: copied or moved, synced before the handle is returned
    streams = storage.create_access(JOB).streams(2, "0")
    for move in (False, True):
        source = tmp_path / f"native-{move}"
        source.write_bytes(b"x" * 100_000)
        del events[:]
        handle = streams.upload_file(str(source), StateScope.SHARED, "native", move=move)
        target = os.path.join(job, handle.path)
        assert {("fsync", target), ("fsync", os.path.dirname(target)), ("fsync", job)} <= set(events), \
            f"upload_file(move={move}) returned before {target} was synced: {events}"


# ---------------------------------------------------------------------------- corrupt state file


def test_flipped_bytes_in_a_state_file_fail_restore_naming_the_file(location, tmp_path):
    storage = location.storage()
    runner = _runner(storage, tmp_path, parallelism=2)
    runner.run_epoch(make_rows(4000, 2000, seed=5))
    metadata = runner.latest_metadata()
    files = file_streams(metadata)
    assert files, "the checkpoint's keyed state stayed inline; the scenario needs state files"
    victim = next(h for s in metadata.operator("keyed-process").subtasks for h in s.keyed
                  if isinstance(h.stream, FileStateHandle))
    kg, byte_range = sorted(victim.key_groups.items())[len(victim.key_groups) // 2]
    path = posixpath.join(location.path("checkpoints", JOB), victim.stream.path)
    data = bytearray(location.fs.cat_file(path))
    for i in range(3):  # flip a few bytes inside one key group's range
        data[byte_range.offset + byte_range.length // 2 + i] ^= 0x5A
    location.fs.pipe_file(path, bytes(data))

    restarted = _runner(storage, tmp_path, parallelism=2)
    with pytest.raises(CorruptStateError) as caught:
        restarted.run_epoch(make_rows(10, 5, seed=6))
    message = str(caught.value)
    assert "checksum" in message, f"not a checksum error: {message}"
    assert victim.stream.path in message, f"the error does not name the file {victim.stream.path}: {message}"
    with pytest.raises(CorruptStateError, match="checksum") as whole:
        restarted.streams.read(victim.stream)
    assert path in str(whole.value) or victim.stream.path in str(whole.value), \
        f"reading the whole file does not name it: {whole.value}"


# ---------------------------------------------------------------------------- moved savepoint


def test_moved_savepoint_restores_at_parallelism_3_and_7(location, tmp_path):
    rows_1, rows_2, rows_3 = make_rows(3000, 1500, 21), make_rows(2000, 1500, 22), make_rows(1000, 1500, 23)
    runner = _runner(location.storage(), tmp_path, parallelism=4, state_backend=HeapStateBackend())
    runner.run_epoch(rows_1)
    runner.run_epoch(rows_2)
    taken = runner.savepoint(location.url_of("savepoints"))
    assert file_streams(taken), "the savepoint's keyed state stayed inline; the scenario needs files to move"
    (directory,) = location.fs.ls(location.path("savepoints"), detail=False)
    name = posixpath.basename(directory.rstrip("/"))
    assert name.startswith("savepoint-"), f"unexpected savepoint directory {directory}"
    target = location.path("elsewhere", "moved", name)
    location.move(location.path("savepoints", name), target)
    assert not location.fs.exists(location.path("savepoints", name, "_metadata")), "the savepoint was not moved"

    resolved = resolve(location.url_of("elsewhere", "moved", name), location.storage_options)
    assert resolved.pointer.is_savepoint, f"{resolved.pointer} is not a savepoint"
    metadata = CheckpointMetadata.from_bytes(resolved.metadata)
    assert metadata == taken, "the moved savepoint's metadata differs from the one taken"
    for parallelism in (3, 7):
        assert_state_is_oracle(dump_state(metadata, resolved.streams, parallelism, tmp_path),
                               rows_1 + rows_2, f"the moved savepoint restored at parallelism {parallelism}")
        resumed = _runner(location.storage(), tmp_path, parallelism=parallelism, job_id=f"resumed-{parallelism}")
        resumed.restore_from(metadata, resolved.streams)
        resumed.run_epoch(rows_3)
        assert_state_is_oracle(dump_state(resumed.latest_metadata(), resumed.streams, parallelism, tmp_path),
                               rows_1 + rows_2 + rows_3, f"a job resumed from it at parallelism {parallelism}")


def test_a_second_savepoint_of_the_same_checkpoint_is_refused_before_writing_anything(location, tmp_path):
    """``savepoint-<job>-<checkpoint id>`` names one savepoint: taking it again fails at once,
    naming the savepoint, and leaves the completed one exactly as it was (no orphan files in it)."""
    runner = _runner(location.storage(), tmp_path, parallelism=2)
    runner.run_epoch(make_rows(3000, 1500, 24))
    runner.savepoint(location.url_of("savepoints"))
    before = location.files("savepoints")
    with pytest.raises(SnapshotError, match=r"savepoint-scenario-job-1 already exists"):
        runner.savepoint(location.url_of("savepoints"))
    after = location.files("savepoints")
    assert after == before, f"the refused savepoint left files in the completed one: {sorted(after.keys() - before.keys())}"


def test_a_savepoint_failing_before_its_commit_leaves_nothing_and_can_be_taken_again(location, tmp_path,
                                                                                     monkeypatch):
    """Its files are written, then its ``_metadata`` fails: the savepoint's directory is removed
    (no orphan files), and taking it again completes and restores the oracle's state."""
    rows = make_rows(3000, 1500, 25)
    runner = _runner(location.storage(), tmp_path, parallelism=2)
    runner.run_epoch(rows)
    written: list[str] = []
    real_commit = SavepointLocation.commit

    def fail(self, checkpoint_id, metadata):
        written.extend(self.fs.find(self.directory))
        raise SnapshotError("injected: the savepoint's _metadata cannot be written")

    monkeypatch.setattr(SavepointLocation, "commit", fail)
    with pytest.raises(SnapshotError, match="injected"):
        runner.savepoint(location.url_of("savepoints"))
    assert written, "the scenario needs savepoint files written before the commit"
    directory = location.path("savepoints", f"savepoint-{JOB}-1")
    assert not location.fs.exists(directory), f"the failed savepoint left {location.fs.find(directory)}"

    monkeypatch.setattr(SavepointLocation, "commit", real_commit)
    runner.savepoint(location.url_of("savepoints"))
    resolved = resolve(location.url_of("savepoints", f"savepoint-{JOB}-1"), location.storage_options)
    assert_restores_oracle(location, tmp_path, resolved, "from-savepoint", [], rows,
                           "restored from the savepoint taken again")


def test_a_failed_savepoint_attempt_removes_only_its_own_files(location, tmp_path):
    """Two attempts at the same savepoint (two tools at once): the one that fails removes the files
    it wrote and none of the other's, which then completes and restores the oracle's state."""
    rows = make_rows(3000, 1500, 26)
    runner = _runner(location.storage(), tmp_path, parallelism=2)
    runner.run_epoch(rows)
    source = runner.store.latest().metadata
    storage, url = location.storage(), location.url_of("savepoints")
    first = storage.savepoint_location(url, "concurrent")
    second = storage.savepoint_location(url, "concurrent")
    written = snapshot_as_savepoint(source, runner.streams, runner.state_backend, lambda subtask: first.streams,
                                    local_dir=str(tmp_path / "first"))
    first_files = set(location.fs.find(first.directory))
    assert first_files, "the scenario needs the first attempt's files"

    def fail(checkpoint_id, metadata):
        raise SnapshotError("injected: the second attempt's _metadata cannot be written")

    second.commit = fail  # type: ignore[method-assign]
    with pytest.raises(SnapshotError, match="injected"):
        write_savepoint(second, source, runner.streams, runner.state_backend, str(tmp_path / "second"))
    assert set(location.fs.find(first.directory)) == first_files, \
        "the failed attempt removed files of the other attempt, or left its own"

    first.commit(written.checkpoint_id, written.to_bytes())
    resolved = resolve(location.url_of("savepoints", "savepoint-concurrent"), location.storage_options)
    assert_restores_oracle(location, tmp_path, resolved, "from-concurrent", [], rows,
                           "restored from the savepoint the other attempt completed")


# ---------------------------------------------------------------------------- no-claim restore


def test_no_claim_restore_never_deletes_the_source_checkpoint(location, tmp_path):
    rows = [make_rows(1500, 800, seed) for seed in range(30, 36)]
    source = _runner(location.storage(), tmp_path, parallelism=2, job_id="source", num_retained=3)
    source.run_epoch(rows[0])
    source.run_epoch(rows[1])
    before = location.files("checkpoints", "source")
    assert any("/chk-2/" in p for p in before), f"the source job has no chk-2 files: {sorted(before)}"

    target = _runner(location.storage(), tmp_path, parallelism=3, job_id="target", num_retained=1)
    target.restore_from(source.latest_metadata(), source.streams)  # no-claim is the default
    for epoch_rows in rows[2:]:
        target.run_epoch(epoch_rows)
        after = location.files("checkpoints", "source")
        assert after == before, (f"the target job changed the source job's files: removed "
                                 f"{sorted(before.keys() - after.keys())[:3]}, changed "
                                 f"{[p for p in before if p in after and before[p] != after[p]][:3]}")
    # checkpoint ids continue after the restored chk-2: the four epochs are 3..6
    assert [c.checkpoint_id for c in target.store.completed()] == [6], \
        f"the target job retains {[c.checkpoint_id for c in target.store.completed()]}, expected [6]"
    assert_state_is_oracle(dump_state(target.latest_metadata(), target.streams, 3, tmp_path),
                           [r for epoch_rows in rows for r in epoch_rows], "the target job after 4 epochs")


def test_no_claim_restore_from_an_older_checkpoint_of_the_same_job_keeps_it(location, tmp_path):
    """Restarting a job (same job id) from one of its own older checkpoints in no-claim mode:
    retention of the restarted job must not delete the checkpoint it restored from."""
    rows = [make_rows(1500, 800, seed) for seed in range(40, 45)]
    first = _runner(location.storage(), tmp_path, parallelism=2, num_retained=3)
    for epoch_rows in rows[:3]:
        first.run_epoch(epoch_rows)
    chk1 = first.store.completed()[0]
    assert chk1.checkpoint_id == 1, f"the first run retains {[c.checkpoint_id for c in first.store.completed()]}"
    before = location.files("checkpoints", JOB, "chk-1")
    restarted = _runner(location.storage(), tmp_path, parallelism=2, num_retained=1)
    restarted.restore_from(chk1.metadata, restarted.streams)  # no-claim is the default
    for epoch_rows in rows[3:]:
        restarted.run_epoch(epoch_rows)
    after = location.files("checkpoints", JOB, "chk-1")
    assert after == before, (f"retention deleted or changed the restored chk-1: removed "
                             f"{sorted(before.keys() - after.keys())[:3]}")
    assert_state_is_oracle(dump_state(restarted.latest_metadata(), restarted.streams, 2, tmp_path),
                           rows[0] + rows[3] + rows[4], "the job restarted from chk-1")


def test_a_replay_after_a_restart_never_restores_a_checkpoint_older_than_its_restore_point(location, tmp_path):
    """After a restart, the job's directory also holds a checkpoint it no longer retains (restored
    from in no-claim mode, so kept). A replay of an epoch whose restore point retention removed
    must be refused, as in the run that wrote them, not restore the kept checkpoint and lose the
    epochs between them."""
    rows = [make_rows(300, 100, seed) for seed in range(60, 70)]
    first = _runner(location.storage(), tmp_path, parallelism=2, num_retained=3)
    for epoch_rows in rows[:5]:
        first.run_epoch(epoch_rows)
    chk3 = first.store.completed()[0]
    first.restore_from(chk3.metadata, first.streams)  # the job's own checkpoint, no-claim: kept for good
    for epoch_rows in rows[5:]:
        first.run_epoch(epoch_rows)  # epochs 6-10 (their restore points: 3, 6, 7, 8, 9)
    restarted = _runner(location.storage(), tmp_path, parallelism=2, num_retained=3)
    assert [c.checkpoint_id for c in restarted.store.completed()] == [3, 8, 9, 10]
    with pytest.raises(RestoreError, match="epoch 8 cannot be replayed"):
        restarted.run_epoch(rows[7], checkpoint_id=8)
    restarted.run_epoch(rows[8], checkpoint_id=10)  # a replay whose restore point is retained goes on
    assert_state_is_oracle(dump_state(restarted.latest_metadata(), restarted.streams, 2, tmp_path),
                           rows[0] + rows[1] + rows[2] + rows[5] + rows[6] + rows[7] + rows[8] + rows[8],
                           "epoch 10 replayed after the restart")


def test_a_checkpoint_whose_deletion_failed_keeps_its_files_until_it_is_deleted(tmp_path, caplog):
    """Retention fails to delete chk-1's _metadata, and the next checkpoint's retry fails too:
    chk-1 still looks complete, so its shared files must stay until a retry deletes it."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0)
    runner = _runner(storage, tmp_path, parallelism=2, num_retained=1, incremental=True)
    access = runner.storage
    remove, failed = access.fs.rm_file, []

    def remove_failing_once(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("chk-1/_metadata") and len(failed) < 2:
            failed.append(path)
            raise OSError(5, "Input/output error")
        return remove(path, *args, **kwargs)

    access.fs.rm_file = remove_failing_once
    rows = [make_rows(300, 100, seed) for seed in range(70, 74)]

    def missing_files_of_complete_checkpoints() -> list[str]:
        found = (CheckpointMetadata.from_bytes(access.read_metadata(p)) for p in access.completed())
        return [h.path for metadata in found for h in stream_handles(metadata)
                if isinstance(h, FileStateHandle) and not os.path.exists(os.path.join(access.job_root, h.path))]

    runner.run_epoch(rows[0])
    runner.run_epoch(rows[1])  # retention deletes chk-1: its _metadata fails
    assert failed and "deleting checkpoint 1 failed" in caplog.text
    for epoch_rows in rows[2:]:
        runner.run_epoch(epoch_rows)  # the first retry fails, the second deletes chk-1
        assert not missing_files_of_complete_checkpoints(), "a checkpoint that looks complete lost files"
    assert len(failed) == 2 and "deleting checkpoint 1 failed again" in caplog.text
    assert not os.path.exists(os.path.join(access.job_root, "chk-1", "_metadata")), "chk-1 was not deleted again"
    assert_state_is_oracle(dump_state(runner.latest_metadata(), runner.streams, 2, tmp_path), sum(rows, []),
                           "the job after a failed deletion")


# ---------------------------------------------------------------------------- bad input


def test_unknown_storage_name_names_the_setting():
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.checkpoint\.storage='nope' is unknown"):
        storage_class("nope")


def test_url_scheme_fsspec_cannot_open_names_the_setting():
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.checkpoint\.dir='nosuchscheme://x'"):
        FileSystemCheckpointStorage("nosuchscheme://x")


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_checkpoint_dir_that_is_a_file_fails_at_start_naming_the_setting(scheme, tmp_path):
    if scheme == "file":
        blocker = tmp_path / "a-file"
        blocker.write_bytes(b"not a directory")
        url = blocker.as_uri()
    else:
        fs = fsspec.filesystem("memory")
        path = f"/statekit-scenarios/{uuid.uuid4().hex}/a-file"
        fs.pipe_file(path, b"not a directory")
        url = f"memory://{path}"
    try:
        with pytest.raises(ConfigurationError, match=r"spark\.statekit\.checkpoint\.dir=.*not writable"):
            _runner(FileSystemCheckpointStorage(url), tmp_path, parallelism=1)  # a job starting
    finally:
        if scheme == "memory":
            fsspec.filesystem("memory").rm(posixpath.dirname(path), recursive=True)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_checkpoint_dir_fails_at_start_naming_the_setting(tmp_path):
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o500)
    try:
        with pytest.raises(ConfigurationError, match=r"spark\.statekit\.checkpoint\.dir=.*not writable"):
            FileSystemCheckpointStorage(read_only.as_uri()).create_access(JOB)
    finally:
        read_only.chmod(0o700)


def test_unwritable_savepoint_dir_names_its_setting(tmp_path):
    runner = _runner(None, tmp_path, parallelism=1)
    runner.run_epoch(make_rows(50, 10, seed=1))
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.savepoint\.dir=.*not writable"):
        runner.savepoint(blocker.as_uri())


def test_restore_path_without_a_completed_checkpoint_names_the_setting(location, tmp_path):
    access = location.storage().create_access(JOB)  # creates the job directory, nothing completed
    # an object store has no empty directories: there, the job directory does not exist yet
    incomplete = r"spark\.statekit\.restore\.path=.*(no completed checkpoint|does not exist)"
    with pytest.raises(RestoreError, match=incomplete):
        resolve(location.url_of("checkpoints", JOB), location.storage_options)
    write_stream(access.streams(1, "op-0"), payload(64 * 1024))  # a file of chk-1, which never completes
    with pytest.raises(RestoreError, match=r"spark\.statekit\.restore\.path=.*_metadata does not exist"):
        resolve(location.url_of("checkpoints", JOB, "chk-1"), location.storage_options)


# ---------------------------------------------------------------------------- jobmanager limit


def test_jobmanager_snapshot_over_the_limit_names_the_setting(tmp_path):
    runner = _runner(JobManagerCheckpointStorage(max_state_size=10_000), tmp_path, parallelism=2)
    with pytest.raises(SnapshotError) as caught:
        runner.run_epoch(make_rows(2000, 1000, seed=9))
    message = str(caught.value)
    assert "spark.statekit.checkpoint.jobmanager.max-state-size" in message, f"setting not named: {message}"
    assert "spark.statekit.checkpoint.storage=filesystem" in message, f"no filesystem suggestion: {message}"
    assert runner.store.latest() is None, "a checkpoint over the limit completed anyway"


def test_jobmanager_limit_must_be_positive():
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.checkpoint\.jobmanager\.max-state-size"):
        JobManagerCheckpointStorage(max_state_size="lots")


def test_jobmanager_snapshot_under_the_limit_completes(tmp_path):
    rows = make_rows(200, 50, seed=10)
    runner = _runner(JobManagerCheckpointStorage(max_state_size=1_000_000), tmp_path, parallelism=2)
    runner.run_epoch(rows)
    metadata = runner.latest_metadata()
    assert all(isinstance(s, InlineStateHandle) for sub in metadata.operator("keyed-process").subtasks
               for h in sub.keyed for s in h.stream_handles())
    assert_state_is_oracle(dump_state(metadata, runner.streams, 2, tmp_path), rows, "jobmanager storage")


def test_replayed_epoch_keeps_the_new_attempts_files(tmp_path):
    """A replayed epoch writes beside the superseded attempt (same chk-<n>): replacing the old
    attempt must delete only the old attempt's files, also when nothing else is retained."""
    from statekit.backends.rocksdb import RocksDBStateBackend
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0)
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                         storage=storage, state_backend=RocksDBStateBackend(**{"local-dir": str(tmp_path / "l")}),
                         incremental=True, num_retained=1, job_id="replay")
    rows = [make_rows(800, 200, seed) for seed in (51, 52)]
    runner.run_epoch(rows[0])
    runner.run_epoch(rows[1], checkpoint_id=1)  # replay epoch 1 with other input: it replaces chk-1
    metadata = runner.latest_metadata()
    for handle in (h for s in metadata.operators[runner.operator_id].subtasks for k in s.keyed
                   for h in k.stream_handles() if hasattr(h, "path")):
        assert os.path.exists(os.path.join(runner.storage.job_root, handle.path)), f"{handle.path} was deleted"
    found = workload_dump(metadata, runner.streams, str(tmp_path / "dump"),
                          state_backend=RocksDBStateBackend(**{"local-dir": str(tmp_path / "d")}))
    assert_state_is_oracle(found, rows[1], "the replayed epoch")


def test_a_failed_deletion_of_a_replaced_attempt_never_deletes_its_replacement(tmp_path):
    """A replay of epoch 2 replaces chk-2 in place; deleting the old attempt fails. The next commit
    must not retry that deletion: chk-2 is the replacement's directory now."""
    access = FileSystemCheckpointStorage(str(tmp_path / "checkpoints")).create_access("job")
    store = CheckpointStore(access, num_retained=3)
    for checkpoint_id in (1, 2, 3):
        store.add(CheckpointMetadata(checkpoint_id, "job", {}))
    remove, failed = access.fs.rm, []

    def remove_failing_once(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("chk-2") and not failed:
            failed.append(path)
            raise OSError(5, "Input/output error")
        return remove(path, *args, **kwargs)

    access.fs.rm = remove_failing_once
    with pytest.raises(StatekitError):
        store.add(CheckpointMetadata(2, "job", {}, properties={"attempt": 2}))
    assert failed
    store.add(CheckpointMetadata(2, "job", {}, properties={"attempt": 3}))
    store.add(CheckpointMetadata(3, "job", {}))
    assert [p.checkpoint_id for p in access.completed()] == [c.checkpoint_id for c in store.completed()] == [1, 2, 3]
