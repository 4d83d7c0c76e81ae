"""Storage level of the conformance suite: commit, retention, the job's owner record (fencing),
corrupt files, IO errors.

A checkpoint storage plugin reuses it fsspec-style: subclass ``StorageTests`` (or one of the
mixins) in a test module and override the ``checkpoint_storage`` fixture to return a
``CheckpointStorage`` writing to a fresh, empty location for every test::

    class TestMyStorage(StorageTests):
        @pytest.fixture
        def checkpoint_storage(self, tmp_path):
            return MyCheckpointStorage(...)

What the storage is (``writes_files``, ``shared_files``, ``durable``) comes from its class
declarations (``CheckpointStorage``); a test class may override each as a class attribute:

* ``writes_files``: ``True`` when a stream of ``file_payload_size`` bytes must be stored apart
  from the metadata (the tests that damage stored bytes then fail instead of skipping if it
  stays inline), ``False`` when the storage keeps every byte inline (they skip; a stream stored
  apart then fails them), ``None`` to decide per written handle;
* ``shared_files``: the same for streams written with ``StateScope.SHARED`` (``True``: they
  must be ``access.is_shared()``; ``False``: the shared-file tests skip, and fail on a stream that
  ``is_shared()``);
* ``durable``: whether a second ``create_access(job)`` sees the checkpoints committed through
  the first (``False`` for driver-memory storages such as ``jobmanager``: checked, a new access
  must then start empty);
* ``file_payload_size``: bytes written where a test needs a stored stream (must exceed the
  storage's memory threshold); ``large_payload_size``: the "large stream" round trip (> 1 MiB).

The tests that damage stored bytes, and the unwritable-location test, go through the storage's
test support (``storage_support.StorageTestSupport``, named by ``CheckpointStorage.test_support``):
a storage author provides it once, for this level and for the one command alike.

Shared-file tests need a keyed handle that references several streams; this module registers
the test-only handle type ``conformance-multi`` (``MultiStreamKeyedHandle``) for that. It is
JSON round-tripped through ``_metadata`` like any plugin handle.

Assertions carry their own messages: pytest does not rewrite asserts in installed packages.
"""
from __future__ import annotations

import io
import json
import posixpath
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest

from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.ownership import BOUNDED, JobOwnership
from statekit.checkpoint.store import CheckpointStore, CompletedCheckpoint, RestoreMode
from statekit.conformance_tests.workload import WorkloadFunction, make_rows
from statekit.spi.errors import (
    ConfigurationError, CorruptStateError, JobOwnershipError, RestoreError, SnapshotError,
)
from statekit.spi.handles import (
    FileStateHandle, InlineStateHandle, KeyedStateHandle, KeyGroupsStateHandle, StateHandle,
    StreamStateHandle, checksum, register_handle,
)
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.storage import (
    CheckpointStorage, CheckpointStorageAccess, CheckpointStreams, CompletedCheckpointPointer, StateScope,
)
from statekit.conformance_tests.expect import expect_error
from statekit.conformance_tests.local_disk import (
    KILLED, DiskRecorder, commit_killed_at, crash_points, files_under, unwatched_writes,
)
from statekit.conformance_tests.storage_support import StorageTestSupport, support_for

KiB = 1024
MiB = 1024 * KiB
MAX_PARALLELISM = 128
OPERATOR = "conformance-op"
SUBTASK = "conformance-op-0"


# ---------------------------------------------------------------------------- test-only handle


@register_handle("conformance-multi")
@dataclass(frozen=True)
class MultiStreamKeyedHandle(KeyedStateHandle):
    """Test-only keyed handle referencing several streams (like an incremental snapshot that
    reuses shared files of earlier checkpoints). Used by the shared-file retention tests."""

    key_group_range: KeyGroupRange
    streams: tuple[StreamStateHandle, ...]

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield from self.streams

    def _fields_json(self) -> dict[str, Any]:
        return {"key_group_range": self.key_group_range.to_json(), "streams": [s.to_json() for s in self.streams]}

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> "MultiStreamKeyedHandle":
        streams = tuple(StateHandle.from_json(s) for s in data["streams"])
        return cls(KeyGroupRange.from_json(data["key_group_range"]), streams)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- helpers


def payload(size: int, seed: int = 0) -> bytes:
    """``size`` deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(size)


def write_stream(streams: CheckpointStreams, data: bytes, scope: StateScope = StateScope.EXCLUSIVE,
                 name: str | None = None, chunk: int = 64 * KiB) -> StreamStateHandle:
    """Write ``data`` in chunks through a new output stream; check ``tell``, size and checksum."""
    out = streams.create_output(scope, name)
    for start in range(0, len(data), chunk):
        out.write(data[start:start + chunk])
        expected = min(start + chunk, len(data))
        assert out.tell() == expected, f"tell() is {out.tell()} after writing {expected} bytes"
    handle = out.close_and_get_handle()
    assert handle.size == len(data), f"the handle records {handle.size} bytes, {len(data)} were written"
    assert handle.checksum == checksum(data), (
        f"the handle records checksum {handle.checksum}, the bytes written have {checksum(data)}")
    return handle


def json_round_trip(handle: StateHandle) -> StateHandle:
    """The handle as it comes back out of ``_metadata``."""
    return StateHandle.from_json(json.loads(json.dumps(handle.to_json())))


def make_metadata(checkpoint_id: int, streams: Sequence[StreamStateHandle],
                  job_id: str = "conformance-job") -> CheckpointMetadata:
    """Metadata of one subtask whose keyed state references ``streams`` (fixed timestamp, so
    the same arguments always give the same bytes)."""
    handle = MultiStreamKeyedHandle(KeyGroupRange(0, MAX_PARALLELISM - 1), tuple(streams))
    operator = OperatorState(OPERATOR, 1, MAX_PARALLELISM, (SubtaskState((handle,)),))
    return CheckpointMetadata(checkpoint_id, job_id, {OPERATOR: operator}, timestamp=0.0)


def ids(pointers: Sequence[CompletedCheckpointPointer]) -> list[int]:
    return [p.checkpoint_id for p in pointers]


def store_ids(store: CheckpointStore) -> list[int]:
    return [c.checkpoint_id for c in store.completed()]


def is_readable(access: CheckpointStorageAccess, handle: StreamStateHandle) -> bool:
    """Whether the stream can still be read: ``False`` when it is gone (``RestoreError``); a
    stream that exists but reads back corrupt fails the test."""
    try:
        access.restore_streams().read(handle)
    except CorruptStateError as exc:
        raise AssertionError(f"{handle} should be intact or gone, but reads back corrupt: {exc}") from exc
    except RestoreError:
        return False
    return True


def _describe(handle: StreamStateHandle) -> str:
    return handle.stored_as or f"{type(handle).__name__}({handle.size} bytes)"


# ---------------------------------------------------------------------------- base


class StorageTestBase:
    """Base of every storage mixin: override ``checkpoint_storage`` in the subclass."""

    job_id = "conformance-job"
    writes_files: bool | None = None  # None here: as the storage class declares
    shared_files: bool | None = None
    durable: bool | None = None
    file_payload_size = 64 * KiB
    large_payload_size = MiB + 4321
    support: StorageTestSupport
    storage_under_test: CheckpointStorage

    @pytest.fixture
    def checkpoint_storage(self) -> CheckpointStorage:
        raise NotImplementedError("override the `checkpoint_storage` fixture to return your CheckpointStorage "
                                  "(a fresh, empty location per test)")

    @pytest.fixture(autouse=True)
    def _storage_declarations(self, checkpoint_storage: CheckpointStorage) -> None:
        """What the storage declares, unless the test class says otherwise, and its test support."""
        declared = type(checkpoint_storage)
        if not isinstance(checkpoint_storage, CheckpointStorage):
            raise AssertionError(f"the checkpoint_storage fixture returned {checkpoint_storage!r}, "
                                 f"not a statekit.spi.storage.CheckpointStorage")
        self.storage_under_test = checkpoint_storage
        self.support = support_for(declared)
        self.writes_files = declared.writes_files if self.writes_files is None else self.writes_files
        self.shared_files = declared.shared_files if self.shared_files is None else self.shared_files
        self.durable = declared.durable if self.durable is None else self.durable

    @pytest.fixture
    def access(self, checkpoint_storage: CheckpointStorage) -> CheckpointStorageAccess:
        return checkpoint_storage.create_access(self.job_id)

    # --- requirements
    def require_durable(self, checkpoint_storage: CheckpointStorage) -> None:
        if not self.durable:
            pytest.skip(f"{type(checkpoint_storage).__name__} is not durable: a new access starts empty")

    def require_file(self, handle: StreamStateHandle) -> None:
        """Skip unless ``handle`` is not inline; fail where that contradicts ``writes_files`` (a
        declaration cannot skip the tests that damage the files a storage does write)."""
        if isinstance(handle, InlineStateHandle):
            if self.writes_files:
                raise AssertionError(f"a stream of {handle.size} bytes stayed inline, but writes_files=True "
                                     f"says it must become a file (raise file_payload_size above the memory "
                                     f"threshold, or set writes_files=None)")
            pytest.skip(f"the storage kept a {handle.size}-byte stream inline: no file to damage")
        if self.writes_files is False:
            raise AssertionError(f"writes_files=False says the storage keeps every byte inline, but a "
                                 f"{handle.size}-byte stream was stored apart ({_describe(handle)}): declare "
                                 f"writes_files=True or None, so that the tests of stored files run")

    def write_file(self, access: CheckpointStorageAccess, checkpoint_id: int, seed: int = 0,
                   size: int | None = None) -> tuple[StreamStateHandle, bytes]:
        """An exclusive stream that must be a file (skips the test when the storage keeps it inline)."""
        data = payload(size or self.file_payload_size, seed)
        handle = write_stream(access.streams(checkpoint_id, SUBTASK), data)
        self.require_file(handle)
        return handle, data

    def write_shared(self, access: CheckpointStorageAccess, checkpoint_id: int, seed: int) -> StreamStateHandle:
        """A stream in shared scope that ``access.is_shared`` recognizes (or skip the test)."""
        handle = write_stream(access.streams(checkpoint_id, SUBTASK), payload(self.file_payload_size, seed),
                              StateScope.SHARED, name=f"shared-{seed}")
        if access.is_shared(handle) and self.shared_files is False:
            raise AssertionError(f"shared_files=False says the storage keeps no shared files, but a stream written "
                                 f"with StateScope.SHARED ({_describe(handle)}) is_shared(): declare "
                                 f"shared_files=True or None, so that the shared-file tests run")
        if not access.is_shared(handle):
            if self.shared_files:
                raise AssertionError(f"a stream written with StateScope.SHARED ({_describe(handle)}) is not "
                                     f"is_shared(), but shared_files=True says it must be")
            pytest.skip(f"{type(access).__name__}.is_shared() is False for a SHARED-scope stream "
                        f"({type(handle).__name__}): the storage has no shared files")
        return handle

    # --- damaging stored bytes (through the storage's test support)
    def _damage(self, how: str, handle: StreamStateHandle, *args: Any) -> str:
        damaged = getattr(self.support, how)(self.storage_under_test, self.job_id, handle, *args)
        if damaged is None:
            pytest.skip(f"{type(self.support).__name__}.{how}() cannot reach the stored bytes of a "
                        f"{type(handle).__name__} of {type(self.storage_under_test).__name__}: give the storage a "
                        f"test_support whose locate() (or corrupt/truncate/delete) finds them")
        return damaged

    def corrupt(self, handle: StreamStateHandle, offset: int | None = None) -> str:
        """Flip one byte of the stored stream (the middle one by default); return its name."""
        return self._damage("corrupt", handle, offset)

    def truncate(self, handle: StreamStateHandle) -> str:
        """Cut the stored stream to half its size; return its name."""
        return self._damage("truncate", handle)

    def delete(self, handle: StreamStateHandle) -> str:
        """Remove the stored stream; return its name."""
        return self._damage("delete", handle)


def _names_file(message: str, path: str) -> bool:
    """Whether an error message names the file ``path`` (its full path or its unique base name)."""
    return path in message or posixpath.basename(path) in message


# ---------------------------------------------------------------------------- commit


class StorageCommitTests(StorageTestBase):
    """Streams, commit, visibility of completed checkpoints, abort and dispose."""

    def test_small_stream_round_trip(self, access):
        data = b"small state \x00\xff" * 7
        handle = write_stream(access.streams(1, SUBTASK), data)
        assert access.streams(1, SUBTASK).read(handle) == data, "a small stream reads back different bytes"
        again = json_round_trip(handle)
        assert access.restore_streams().read(again) == data, \
            "a small stream reads back different bytes after its handle went through JSON"

    def test_empty_stream_round_trip(self, access):
        handle = write_stream(access.streams(1, SUBTASK), b"")
        assert access.restore_streams().read(handle) == b"", "an empty stream does not read back empty"

    def test_large_stream_round_trip(self, access):
        data = payload(self.large_payload_size, seed=1)
        handle = write_stream(access.streams(1, SUBTASK), data)
        if self.writes_files:
            assert not isinstance(handle, InlineStateHandle), \
                f"a {len(data)}-byte stream stayed inline, but writes_files=True"
        again = json_round_trip(handle)
        read = access.restore_streams().read(again)
        assert read == data, f"a {len(data)}-byte stream reads back different bytes ({len(read)} bytes)"

    def test_copy_to_writes_the_verified_bytes(self, access):
        data = payload(self.large_payload_size, seed=4)
        handle = json_round_trip(write_stream(access.streams(1, SUBTASK), data))
        target = io.BytesIO()
        access.restore_streams().copy_to(handle, target)
        assert target.getvalue() == data, f"copy_to wrote {len(target.getvalue())} other bytes"

    @pytest.mark.parametrize("move", [False, True], ids=["copy", "move"])
    @pytest.mark.parametrize("scope", [StateScope.EXCLUSIVE, StateScope.SHARED])
    def test_upload_file_stores_the_file_as_a_verified_stream(self, access, tmp_path, scope, move):
        """Native snapshots store their files with ``upload_file`` (``move``: the file may be taken)."""
        for size in (100, self.large_payload_size):
            data = payload(size, seed=6)
            source = tmp_path / f"upload-{size}.sst"
            source.write_bytes(data)
            handle = json_round_trip(access.streams(1, SUBTASK).upload_file(str(source), scope, source.name, move))
            assert handle.size == size, f"upload_file of {size} bytes recorded size {handle.size}"
            assert access.restore_streams().read(handle) == data, f"upload_file of {size} bytes reads back other bytes"
            source.write_bytes(payload(size, seed=7))  # the stored stream is a copy, not the local file
            assert access.restore_streams().read(handle) == data, \
                f"upload_file of {size} bytes stored no copy: changing the local file changed the stream"

    def test_link_to_gives_the_verified_bytes_or_declines(self, access, tmp_path):
        data = payload(self.large_payload_size, seed=5)
        handle = json_round_trip(write_stream(access.streams(1, SUBTASK), data))
        target = tmp_path / "linked"
        if access.restore_streams().link_to(handle, str(target)):
            assert target.read_bytes() == data, f"link_to linked a file of {target.stat().st_size} other bytes"
        else:
            assert not target.exists(), "link_to declined (returned False) but left a file behind"

    def test_read_range(self, access):
        data = payload(self.large_payload_size, seed=2)
        handle = write_stream(access.streams(1, SUBTASK), data)
        streams = access.restore_streams()
        n = len(data)
        for offset, length in ((0, 10), (n // 2, 4096), (n - 100, 100), (12345, 0)):
            got = streams.read_range(handle, offset, length)
            assert got == data[offset:offset + length], f"read_range({offset}, {length}) returned wrong bytes"
        with expect_error(CorruptStateError, 'read_range past the end of a stream must be a CorruptStateError (a short read is corruption)'):
            streams.read_range(handle, n - 10, 20)  # past the end: a short read is corruption

    def test_commit_makes_checkpoint_visible(self, access):
        assert access.completed() == [], f"a new job has completed checkpoints: {access.completed()}"
        assert access.latest_completed() is None, "a new job has a latest completed checkpoint"
        handle = write_stream(access.streams(1, SUBTASK), payload(self.file_payload_size, 3))
        metadata = make_metadata(1, [handle]).to_bytes()
        pointer = access.commit(1, metadata)
        assert pointer.checkpoint_id == 1, f"commit(1) returned a pointer to checkpoint {pointer.checkpoint_id}"
        assert ids(access.completed()) == [1], f"completed() after commit(1) is {ids(access.completed())}"
        latest = access.latest_completed()
        assert latest is not None and latest.checkpoint_id == 1, f"latest_completed() after commit(1) is {latest}"
        assert access.read_metadata(latest) == metadata, "read_metadata returns other bytes than were committed"
        restored = CheckpointMetadata.from_bytes(access.read_metadata(latest))
        assert restored == make_metadata(1, [handle]), "committed metadata does not parse back to itself"

    def test_committed_checkpoint_is_seen_by_a_new_access(self, checkpoint_storage, access):
        """Durable: a new access sees the committed checkpoint. Not durable: it starts empty, as
        declared (a durable storage that declares otherwise would skip the restart, pointer and
        ownership tests)."""
        data = payload(self.file_payload_size, 7)
        handle = write_stream(access.streams(1, SUBTASK), data)
        metadata = make_metadata(1, [handle]).to_bytes()
        access.commit(1, metadata)
        if not self.durable:
            seen = ids(checkpoint_storage.create_access(self.job_id).completed())
            assert seen == [], (f"durable=False says a new access starts empty, but it sees checkpoints {seen}: "
                                f"declare durable=True, so that the tests of a durable storage run")
            return
        fresh = checkpoint_storage.create_access(self.job_id)
        assert ids(fresh.completed()) == [1], f"a new access sees completed checkpoints {ids(fresh.completed())}"
        latest = fresh.latest_completed()
        assert latest is not None and fresh.read_metadata(latest) == metadata, \
            "a new access reads other metadata for checkpoint 1"
        assert fresh.restore_streams().read(handle) == data, "a new access reads other bytes"

    def test_files_without_metadata_are_never_completed(self, checkpoint_storage, access):
        first = write_stream(access.streams(1, SUBTASK), payload(self.file_payload_size, 4))
        access.commit(1, make_metadata(1, [first]).to_bytes())
        # checkpoint 2: every file written, then the coordinator dies before _metadata
        write_stream(access.streams(2, SUBTASK), payload(self.file_payload_size, 5))
        write_stream(access.streams(2, "conformance-op-1"), payload(100, 6))
        access.streams(3, SUBTASK).create_output().write(b"a stream never closed")
        assert ids(access.completed()) == [1], f"completed() lists a checkpoint without _metadata: " \
                                               f"{ids(access.completed())}"
        latest = access.latest_completed()
        assert latest is not None and latest.checkpoint_id == 1, \
            f"latest_completed() is {latest}, but checkpoint 2 never committed its _metadata"
        store = CheckpointStore(access)
        before = store.latest_before(3)
        assert before is not None and before.checkpoint_id == 1, \
            f"the restore point of epoch 3 is {before}, expected checkpoint 1"
        if self.durable:
            fresh = CheckpointStore(checkpoint_storage.create_access(self.job_id))
            assert store_ids(fresh) == [1], f"a restarted coordinator sees {store_ids(fresh)}, expected [1]"

    def test_repeated_commit_with_same_bytes_is_idempotent(self, access):
        metadata = make_metadata(1, [write_stream(access.streams(1, SUBTASK), b"x" * 10)]).to_bytes()
        first = access.commit(1, metadata)
        second = access.commit(1, metadata)
        assert first == second, f"a repeated commit returned another pointer: {first} != {second}"
        assert ids(access.completed()) == [1], f"a repeated commit changed completed(): {ids(access.completed())}"
        assert access.read_metadata(second) == metadata, "a repeated commit changed the metadata"

    def test_commit_with_different_bytes_is_refused(self, access):
        metadata = make_metadata(1, [write_stream(access.streams(1, SUBTASK), b"x" * 10)]).to_bytes()
        pointer = access.commit(1, metadata)
        other = make_metadata(1, [write_stream(access.streams(1, SUBTASK), b"y" * 10)]).to_bytes()
        with expect_error(SnapshotError, 'committing checkpoint 1 again with different metadata must be refused (a completed checkpoint is never overwritten)'):
            access.commit(1, other)
        assert access.read_metadata(pointer) == metadata, \
            "a refused commit with different bytes still replaced the completed checkpoint's metadata"

    def test_concurrent_checkpoints_commit_out_of_order(self, access):
        streams_5, streams_6 = access.streams(5, SUBTASK), access.streams(6, SUBTASK)
        data_5, data_6 = payload(self.file_payload_size, 5), payload(self.file_payload_size, 6)
        out_5, out_6 = streams_5.create_output(), streams_6.create_output()
        chunk = 4 * KiB
        for start in range(0, len(data_5), chunk):  # interleaved writes of two open checkpoints
            out_5.write(data_5[start:start + chunk])
            out_6.write(data_6[start:start + chunk])
        handle_5, handle_6 = out_5.close_and_get_handle(), out_6.close_and_get_handle()
        meta_5, meta_6 = make_metadata(5, [handle_5]).to_bytes(), make_metadata(6, [handle_6]).to_bytes()
        pointer_6 = access.commit(6, meta_6)
        pointer_5 = access.commit(5, meta_5)
        assert ids(access.completed()) == [5, 6], f"completed() is {ids(access.completed())}, expected [5, 6]"
        assert pointer_5 != pointer_6 and pointer_5.external_pointer != pointer_6.external_pointer, \
            f"checkpoints 5 and 6 share a pointer: {pointer_5} / {pointer_6}"
        assert access.read_metadata(pointer_5) == meta_5, "checkpoint 5's metadata is not what it committed"
        assert access.read_metadata(pointer_6) == meta_6, "checkpoint 6's metadata is not what it committed"
        streams = access.restore_streams()
        assert streams.read(handle_5) == data_5, "checkpoint 5's stream reads back other bytes"
        assert streams.read(handle_6) == data_6, "checkpoint 6's stream reads back other bytes"
        latest = access.latest_completed()
        assert latest is not None and latest.checkpoint_id == 6, f"latest_completed() is {latest}, expected 6"

    def test_checkpoints_are_ordered_by_number_not_by_name(self, checkpoint_storage, access):
        """Ids of one, two and three digits, committed out of order: ``completed()`` and
        ``latest_completed()`` follow the numbers (a storage that sorts names as text lists
        chk-10 before chk-9 and restores stale state)."""
        order = [5, 12, 1, 9, 10, 2, 11, 3, 4, 6, 7, 8, 100, 99, 101]
        for checkpoint_id in order:
            handle = write_stream(access.streams(checkpoint_id, SUBTASK), payload(16, checkpoint_id))
            access.commit(checkpoint_id, make_metadata(checkpoint_id, [handle]).to_bytes())
        readers = [("the access that committed", access)]
        if self.durable:
            readers.append(("a new access", checkpoint_storage.create_access(self.job_id)))
        for who, reader in readers:
            listed = ids(reader.completed())
            assert listed == sorted(order), (
                f"completed() of {who} is {listed}: it must list checkpoints oldest first by their number "
                f"(sorting 'chk-<n>' names as text puts chk-10 before chk-9)")
            latest = reader.latest_completed()
            assert latest is not None and latest.checkpoint_id == 101, (
                f"latest_completed() of {who} is {latest}, expected checkpoint 101 (the highest number)")
            point = CheckpointStore(reader).latest_before(100)
            assert point is not None and point.checkpoint_id == 99, (
                f"the restore point of epoch 100 seen by {who} is {point}, expected checkpoint 99")

    def test_a_completed_checkpoint_resolves_by_its_pointer(self, checkpoint_storage, access):
        """As ``spark.statekit.restore.path`` does: the pointer alone finds the metadata, and the
        streams it returns read every handle (handles built relative to another root than the one
        the pointer gives fail here)."""
        self.require_durable(checkpoint_storage)
        written = [(write_stream(access.streams(1, f"conformance-op-{i}"), data, scope), data)
                   for i, (data, scope) in enumerate([(payload(50, 1), StateScope.EXCLUSIVE),
                                                      (payload(self.file_payload_size, 2), StateScope.EXCLUSIVE),
                                                      (payload(self.file_payload_size, 3), StateScope.SHARED)])]
        metadata = make_metadata(1, [h for h, _ in written]).to_bytes()
        pointer = access.commit(1, metadata)
        resolved = checkpoint_storage.resolve_checkpoint(pointer.external_pointer)
        assert resolved.pointer.checkpoint_id == 1, (
            f"resolve_checkpoint({pointer.external_pointer!r}) found checkpoint {resolved.pointer.checkpoint_id}")
        assert resolved.metadata == metadata, \
            f"resolve_checkpoint({pointer.external_pointer!r}) returns other metadata than was committed"
        for handle, data in written:
            try:
                read = resolved.streams.read(json_round_trip(handle))
            except RestoreError as exc:
                raise AssertionError(
                    f"handles must be readable from the checkpoint their pointer names, so they must not be "
                    f"relative to another root (the storage's, another job's): the streams of "
                    f"resolve_checkpoint({pointer.external_pointer!r}) cannot read {_describe(handle)} ({exc})") from exc
            assert read == data, f"the resolved checkpoint reads other bytes for {_describe(handle)}"
        with expect_error(RestoreError, "resolve_checkpoint() of a pointer to no checkpoint must be a RestoreError"):
            checkpoint_storage.resolve_checkpoint(pointer.external_pointer + "-gone")

    def test_jobs_keep_their_checkpoints_apart(self, checkpoint_storage, access):
        other = checkpoint_storage.create_access("conformance-other-job")
        mine_data, theirs_data = payload(self.file_payload_size, 1), payload(self.file_payload_size, 2)
        mine = write_stream(access.streams(1, SUBTASK), mine_data)
        pointer = access.commit(1, make_metadata(1, [mine]).to_bytes())
        assert other.completed() == [], f"another job sees this job's checkpoints: {ids(other.completed())}"
        theirs = write_stream(other.streams(1, SUBTASK), theirs_data)
        other_metadata = make_metadata(1, [theirs], job_id="conformance-other-job").to_bytes()
        other_pointer = other.commit(1, other_metadata)
        assert access.read_metadata(pointer) == make_metadata(1, [mine]).to_bytes(), \
            "checkpoint 1 of another job replaced this job's checkpoint 1"
        assert access.restore_streams().read(mine) == mine_data, "another job's checkpoint 1 overwrote this job's bytes"
        access.dispose(pointer)
        assert other.read_metadata(other_pointer) == other_metadata, "disposing this job's checkpoint 1 removed another job's"
        assert other.restore_streams().read(theirs) == theirs_data, \
            "disposing this job's checkpoint 1 removed another job's bytes"

    def test_abort_removes_an_uncommitted_checkpoint(self, access):
        kept_data = payload(self.file_payload_size, 1)
        kept = write_stream(access.streams(1, SUBTASK), kept_data)
        access.commit(1, make_metadata(1, [kept]).to_bytes())
        aborted = write_stream(access.streams(2, SUBTASK), payload(self.file_payload_size, 2))
        access.abort(2)
        assert ids(access.completed()) == [1], f"completed() after abort(2) is {ids(access.completed())}"
        if not isinstance(aborted, InlineStateHandle):
            assert not is_readable(access, aborted), f"abort(2) left checkpoint 2's file {_describe(aborted)}"
        assert access.restore_streams().read(kept) == kept_data, "abort(2) damaged completed checkpoint 1"

    def test_abort_never_removes_a_completed_checkpoint(self, access):
        handle = write_stream(access.streams(1, SUBTASK), payload(self.file_payload_size, 1))
        metadata = make_metadata(1, [handle]).to_bytes()
        pointer = access.commit(1, metadata)
        try:
            access.abort(1)
        except SnapshotError:
            pass  # refusing is fine; removing is not
        assert ids(access.completed()) == [1], f"abort of a completed checkpoint removed it: {ids(access.completed())}"
        assert access.read_metadata(pointer) == metadata, "abort of a completed checkpoint changed its metadata"
        assert is_readable(access, handle), f"abort of a completed checkpoint removed {_describe(handle)}"

    def test_dispose_removes_a_completed_checkpoint(self, access):
        first = write_stream(access.streams(1, SUBTASK), payload(self.file_payload_size, 1))
        second = write_stream(access.streams(2, SUBTASK), payload(self.file_payload_size, 2))
        pointer_1 = access.commit(1, make_metadata(1, [first]).to_bytes())
        access.commit(2, make_metadata(2, [second]).to_bytes())
        access.dispose(pointer_1)
        assert ids(access.completed()) == [2], f"completed() after dispose(1) is {ids(access.completed())}"
        with expect_error(RestoreError, 'reading the metadata of checkpoint 1 after dispose(1) must be a RestoreError (it no longer exists)'):
            access.read_metadata(pointer_1)
        if not isinstance(first, InlineStateHandle):
            assert not is_readable(access, first), f"dispose(1) left checkpoint 1's file {_describe(first)}"
        assert is_readable(access, second), "dispose(1) removed a file of checkpoint 2"

    def test_identical_bytes_outlive_the_checkpoint_that_wrote_them_first(self, checkpoint_storage, access):
        """A storage may keep identical bytes once (content addressing), but disposing or aborting a
        checkpoint never removes bytes another checkpoint holds: a retained one, nor one whose
        streams were written before the dispose and that commits after it (executors write the
        next checkpoint's streams while the driver disposes old ones)."""
        data = payload(self.file_payload_size, seed=42)
        first, retained = (write_stream(access.streams(i, SUBTASK), data) for i in (1, 2))
        pointer = access.commit(1, make_metadata(1, [first]).to_bytes())
        access.commit(2, make_metadata(2, [retained]).to_bytes())
        pending, aborted = (write_stream(access.streams(i, SUBTASK), data) for i in (3, 4))
        access.dispose(pointer)
        access.abort(4)
        access.commit(3, make_metadata(3, [pending]).to_bytes())
        readers = [("the access", access)]
        if self.durable:
            readers.append(("a new access", checkpoint_storage.create_access(self.job_id)))
        for who, reader in readers:
            for checkpoint_id, handle in ((2, retained), (3, pending)):
                assert is_readable(reader, handle) and reader.restore_streams().read(handle) == data, (
                    f"checkpoints 1 to 4 wrote the same {len(data)} bytes; after dispose(1) and abort(4), {who} "
                    f"cannot read checkpoint {checkpoint_id}'s {_describe(handle)}: bytes another checkpoint holds "
                    f"were deleted (a storage that stores identical bytes once must count who uses them)")

    def test_restore_streams_read_completed_checkpoints(self, checkpoint_storage, access):
        written: list[tuple[StreamStateHandle, bytes]] = []
        for checkpoint_id in (1, 2):
            for index, size in enumerate((50, self.file_payload_size)):
                data = payload(size, seed=checkpoint_id * 10 + index)
                streams = access.streams(checkpoint_id, f"conformance-op-{index}")
                written.append((write_stream(streams, data), data))
            access.commit(checkpoint_id, make_metadata(checkpoint_id, [h for h, _ in written]).to_bytes())
        readers = [access.restore_streams()]
        if self.durable:
            readers.append(checkpoint_storage.create_access(self.job_id).restore_streams())
        for reader in readers:
            for handle, data in written:
                assert reader.read(handle) == data, f"restore_streams() reads other bytes for {_describe(handle)}"
                assert reader.read_range(handle, 10, 20) == data[10:30], \
                    f"restore_streams().read_range reads other bytes for {_describe(handle)}"


# ---------------------------------------------------------------------------- retention


class StorageRetentionTests(StorageTestBase):
    """``CheckpointStore`` on the storage: retention, restart, shared-file lifetime, restore modes."""

    def _add(self, store: CheckpointStore, checkpoint_id: int, shared: Sequence[StreamStateHandle] = ()
             ) -> tuple[CompletedCheckpoint, StreamStateHandle]:
        """Commit a checkpoint referencing ``shared`` plus one new exclusive stream of its own."""
        own = write_stream(store.access.streams(checkpoint_id, SUBTASK),
                           payload(self.file_payload_size, 1000 + checkpoint_id))
        completed = store.add(make_metadata(checkpoint_id, [*shared, own], self.job_id))
        return completed, own

    def _alive(self, access: CheckpointStorageAccess, **files: StreamStateHandle) -> dict[str, bool]:
        return {name: is_readable(access, handle) for name, handle in files.items()}

    def test_keeps_the_last_num_retained(self, access):
        store = CheckpointStore(access, num_retained=2)
        added = {i: self._add(store, i) for i in range(1, 5)}
        assert store_ids(store) == [3, 4], f"the store retains {store_ids(store)}, expected [3, 4]"
        assert ids(access.completed()) == [3, 4], f"the storage lists {ids(access.completed())}, expected [3, 4]"
        for i in (1, 2):
            completed, own = added[i]
            with expect_error(RestoreError, 'reading the metadata of a checkpoint retention disposed must be a RestoreError'):
                access.read_metadata(completed.pointer)
            if not isinstance(own, InlineStateHandle):
                assert not is_readable(access, own), f"disposed checkpoint {i} left {_describe(own)}"
        for i in (3, 4):
            completed, own = added[i]
            assert access.read_metadata(completed.pointer) == completed.metadata.to_bytes(), \
                f"retained checkpoint {i} reads back other metadata"
            assert is_readable(access, own), f"retained checkpoint {i} lost {_describe(own)}"

    def test_retention_over_a_dozen_checkpoints(self, checkpoint_storage, access):
        store = CheckpointStore(access, num_retained=3)
        for i in range(1, 13):
            self._add(store, i)
        assert store_ids(store) == [10, 11, 12], f"the store retains {store_ids(store)}, expected [10, 11, 12]"
        assert ids(access.completed()) == [10, 11, 12], \
            f"the storage lists {ids(access.completed())} after 12 checkpoints with num_retained=3, expected [10, 11, 12]"
        if self.durable:
            restarted = CheckpointStore(checkpoint_storage.create_access(self.job_id), num_retained=3)
            latest = restarted.latest()
            assert latest is not None and latest.checkpoint_id == 12, \
                f"a restarted coordinator restores from {latest}, expected checkpoint 12"

    def test_restarted_store_rebuilds_its_list(self, checkpoint_storage, access):
        store = CheckpointStore(access, num_retained=3)
        for i in range(1, 4):
            self._add(store, i)
        accesses = [access] + ([checkpoint_storage.create_access(self.job_id)] if self.durable else [])
        for other in accesses:
            restarted = CheckpointStore(other, num_retained=3)
            assert store_ids(restarted) == [1, 2, 3], f"a restarted store holds {store_ids(restarted)}"
            for before, after in zip(store.completed(), restarted.completed()):
                assert before.metadata == after.metadata, \
                    f"checkpoint {before.checkpoint_id} reads back other metadata after a restart"
            point = restarted.latest_before(3)
            assert point is not None and point.checkpoint_id == 2, f"latest_before(3) after a restart is {point}"
        restarted = CheckpointStore(accesses[-1], num_retained=2)
        self._add(restarted, 4)
        assert store_ids(restarted) == [3, 4], f"retention after a restart kept {store_ids(restarted)}"
        assert ids(accesses[-1].completed()) == [3, 4], \
            f"the storage lists {ids(accesses[-1].completed())} after retention in a restarted store"

    def test_shared_files_are_deleted_once_unreferenced(self, access):
        s1, s2, s3 = (self.write_shared(access, 1, seed) for seed in (1, 2, 3))
        store = CheckpointStore(access, num_retained=1)
        self._add(store, 1, [s1, s2])
        assert self._alive(access, s1=s1, s2=s2) == {"s1": True, "s2": True}, "chk-1 uses S1, S2"
        self._add(store, 2, [s2, s3])
        assert self._alive(access, s1=s1, s2=s2, s3=s3) == {"s1": False, "s2": True, "s3": True}, \
            "after chk-2 (S2, S3) with num_retained=1: S1 must be deleted, S2 and S3 kept"
        self._add(store, 3, [s3])
        assert self._alive(access, s1=s1, s2=s2, s3=s3) == {"s1": False, "s2": False, "s3": True}, \
            "after chk-3 (S3) with num_retained=1: S1 and S2 must be deleted, S3 kept"

    def test_shared_file_of_a_retained_checkpoint_is_never_deleted(self, access):
        s1, s2 = self.write_shared(access, 1, 1), self.write_shared(access, 3, 2)
        store = CheckpointStore(access, num_retained=2)
        plan = {1: [s1], 2: [s1], 3: [s1, s2], 4: [s2]}
        for checkpoint_id, shared in plan.items():
            self._add(store, checkpoint_id, shared)
            assert is_readable(access, s1), \
                f"S1 was deleted after chk-{checkpoint_id}, but retained {store_ids(store)} include a user of it"
        self._add(store, 5, [s2])
        assert self._alive(access, s1=s1, s2=s2) == {"s1": False, "s2": True}, \
            f"retaining {store_ids(store)} (S2 only): S1 must be deleted, S2 kept"

    def test_registry_is_rebuilt_after_a_restart(self, checkpoint_storage, access):
        s1, s2, s3 = (self.write_shared(access, 1, seed) for seed in (1, 2, 3))
        store = CheckpointStore(access, num_retained=3)
        self._add(store, 1, [s1, s2])
        self._add(store, 2, [s2, s3])
        other = checkpoint_storage.create_access(self.job_id) if self.durable else access
        restarted = CheckpointStore(other, num_retained=1)  # a new coordinator: registry from storage only
        self._add(restarted, 3, [s3])
        assert store_ids(restarted) == [3], f"the restarted store retains {store_ids(restarted)}"
        assert self._alive(other, s1=s1, s2=s2, s3=s3) == {"s1": False, "s2": False, "s3": True}, \
            "after a restart and chk-3 (S3) with num_retained=1: S1 and S2 must be deleted, S3 kept"

    def _restored_store(self, access: CheckpointStorageAccess, mode: RestoreMode
                        ) -> tuple[CheckpointStore, CompletedCheckpoint, StreamStateHandle, list[StreamStateHandle]]:
        """chk-1 uses S1, S2 (and its own exclusive stream); a coordinator then restores from
        chk-1 in ``mode`` with num_retained=1. Returns the store, chk-1, its exclusive stream
        and [S1, S2, S3]."""
        shared = [self.write_shared(access, 1, seed) for seed in (1, 2, 3)]
        source, own = self._add(CheckpointStore(access, num_retained=3), 1, shared[:2])
        store = CheckpointStore(access, num_retained=1, restored_from=source, restore_mode=mode)
        return store, source, own, shared

    def test_no_claim_restore_never_deletes_the_restored_files(self, access):
        store, source, own, (s1, s2, s3) = self._restored_store(access, RestoreMode.NO_CLAIM)
        self._add(store, 2, [s1, s3])  # an incremental checkpoint reusing the restored S1
        self._add(store, 3, [s3])
        self._add(store, 4, [])
        assert store_ids(store) == [4], f"the store retains {store_ids(store)}, expected [4]"
        assert self._alive(access, s1=s1, s2=s2, s3=s3) == {"s1": True, "s2": True, "s3": False}, \
            "no-claim restore from chk-1: its shared S1, S2 are never deleted; S3 (used by 2, 3 only) is"
        assert is_readable(access, own), f"no-claim restore from chk-1 deleted its exclusive {_describe(own)}"
        assert access.read_metadata(source.pointer) == source.metadata.to_bytes(), \
            "no-claim restore from chk-1 deleted or changed its _metadata"

    def test_no_claim_restore_of_an_own_checkpoint_outlives_the_coordinator(self, checkpoint_storage, access):
        """Each coordinator (a Spark epoch builds its own) keeps the job's own checkpoint that an
        earlier one restored in no-claim mode: the later checkpoints record it."""
        store, source, own, (s1, s2, s3) = self._restored_store(access, RestoreMode.NO_CLAIM)
        self._add(store, 2, [s1, s3])
        for checkpoint_id in (3, 4):
            other = checkpoint_storage.create_access(self.job_id) if self.durable else access
            restarted = CheckpointStore(other, num_retained=1)  # no restore point: it knows only what storage says
            self._add(restarted, checkpoint_id, [s3] if checkpoint_id == 3 else [])
        assert self._alive(access, s1=s1, s2=s2, s3=s3) == {"s1": True, "s2": True, "s3": False}, \
            "chk-1 restored in no-claim mode, then chk-2 (S1, S3), chk-3 (S3), chk-4 by new coordinators with " \
            "num_retained=1: S1 and S2 of chk-1 must stay, S3 must go"
        assert is_readable(access, own), f"a later coordinator deleted the no-claim chk-1's exclusive {_describe(own)}"
        assert access.read_metadata(source.pointer) == source.metadata.to_bytes(), \
            "a later coordinator deleted or changed the _metadata of chk-1, restored from in no-claim mode"

    def test_claim_restore_adopts_the_restored_files(self, access):
        store, source, own, (s1, s2, s3) = self._restored_store(access, RestoreMode.CLAIM)
        self._add(store, 2, [s1, s3])
        assert self._alive(access, s1=s1, s2=s2, s3=s3) == {"s1": True, "s2": False, "s3": True}, \
            "claim restore from chk-1, then chk-2 (S1, S3): S2 follows retention and is deleted"
        with expect_error(RestoreError, 'reading the claimed chk-1 after retention disposed it must be a RestoreError'):
            access.read_metadata(source.pointer)  # the claimed chk-1 follows retention too
        if not isinstance(own, InlineStateHandle):
            assert not is_readable(access, own), f"the claimed chk-1 left its exclusive {_describe(own)}"
        self._add(store, 3, [s3])
        assert self._alive(access, s1=s1, s2=s2, s3=s3) == {"s1": False, "s2": False, "s3": True}, \
            "claim restore from chk-1, then chk-3 (S3): the adopted S1 is deleted once unused"

    def test_abort_deletes_the_aborted_checkpoints_shared_files_without_their_handles(self, access):
        """A stage fails after some subtasks wrote their new shared files: the coordinator aborts
        the checkpoint without their handles, so ``abort`` itself removes what was written for it."""
        kept = self.write_shared(access, 1, 1)
        access.commit(1, make_metadata(1, [kept]).to_bytes())
        orphan = self.write_shared(access, 2, 2)
        pending = self.write_shared(access, 3, 3)  # the next checkpoint's, written while 2 is aborted
        access.abort(2)
        assert not is_readable(access, orphan), (
            f"abort(2) left the shared {_describe(orphan)} written for checkpoint 2: no completed checkpoint "
            f"references it, and a subtask that finished in a failed stage never told the coordinator its handle")
        assert is_readable(access, kept), f"abort(2) removed completed checkpoint 1's shared {_describe(kept)}"
        assert is_readable(access, pending), f"abort(2) removed checkpoint 3's shared {_describe(pending)}"

    def test_abort_deletes_only_the_aborted_checkpoints_new_shared_files(self, access):
        s1, s2 = self.write_shared(access, 1, 1), self.write_shared(access, 2, 2)
        store = CheckpointStore(access, num_retained=1)
        self._add(store, 1, [s1])
        handle = MultiStreamKeyedHandle(KeyGroupRange(0, MAX_PARALLELISM - 1), (s1, s2))
        store.abort(2, [SubtaskState((handle,))])
        assert store_ids(store) == [1], f"abort(2) changed the retained checkpoints: {store_ids(store)}"
        assert self._alive(access, s1=s1, s2=s2) == {"s1": True, "s2": False}, \
            "abort(2): its new shared S2 must be deleted, S1 (used by completed chk-1) kept"


# ---------------------------------------------------------------------------- corruption


class StorageCorruptionTests(StorageTestBase):
    """Damaged files are clear errors naming the file, never silently wrong state."""

    def test_flipped_byte_is_a_checksum_error_naming_the_file(self, access, tmp_path):
        handle, _ = self.write_file(access, 1)
        access.commit(1, make_metadata(1, [handle]).to_bytes())
        path = self.corrupt(handle)
        with expect_error(CorruptStateError, 'reading a stream with one flipped byte must fail with a CorruptStateError: the storage must verify the checksum the handle records') as caught:
            access.restore_streams().read(handle)
        message = str(caught.value)
        assert "checksum" in message, f"the error does not say 'checksum': {message}"
        assert _names_file(message, path), f"the error does not name the corrupt file {path}: {message}"
        with expect_error(CorruptStateError, "copy_to of a stream with one flipped byte must fail its checksum"):
            access.restore_streams().copy_to(handle, io.BytesIO())
        target = tmp_path / "linked"
        try:
            linked = access.restore_streams().link_to(handle, str(target))
        except CorruptStateError:
            assert not target.exists(), "link_to of a stream with one flipped byte failed but left the link behind"
        else:
            assert not linked, "link_to of a stream with one flipped byte linked it instead of failing its checksum"

    def test_flipped_byte_fails_a_whole_restore(self, checkpoint_storage, tmp_path):
        """A keyed snapshot written by the heap backend through this storage, one byte flipped in
        a key group's bytes: restoring it (canonical reader) fails naming the file."""
        from statekit.runtime.local_runner import LocalRunner

        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=1, max_parallelism=MAX_PARALLELISM,
                             storage=checkpoint_storage, job_id=self.job_id, local_dir=str(tmp_path / "local"))
        runner.run_epoch(make_rows(3000, 1500, seed=11))
        metadata = runner.latest_metadata()
        assert metadata is not None, "the first epoch did not complete a checkpoint"
        keyed = metadata.operator(runner.operator_id).subtasks[0].keyed
        assert keyed and isinstance(keyed[0], KeyGroupsStateHandle), f"unexpected keyed handles {keyed}"
        handle = keyed[0]
        self.require_file(handle.stream)
        kg, byte_range = sorted(handle.key_groups.items())[len(handle.key_groups) // 2]
        path = self.corrupt(handle.stream, offset=byte_range.offset + byte_range.length // 2)
        with expect_error(CorruptStateError, 'restoring a snapshot with one flipped byte in a key group must fail with a CorruptStateError: the storage must return the stored bytes, and they fail their checksum') as caught:
            runner.run_epoch(make_rows(10, 5, seed=12))  # epoch 2 restores from chk-1
        message = str(caught.value)
        assert "checksum" in message, f"the restore error does not say 'checksum': {message}"
        assert _names_file(message, path), f"the restore error does not name the corrupt file {path}: {message}"
        assert store_ids(runner.store) == [1], f"a failed epoch changed the completed checkpoints: " \
                                               f"{store_ids(runner.store)}"

    def test_truncated_file_is_a_clear_error(self, access):
        handle, _ = self.write_file(access, 1)
        path = self.truncate(handle)
        with expect_error(CorruptStateError, 'reading a stream cut to half its size must fail with a CorruptStateError (the handle records its size and checksum)') as caught:
            access.restore_streams().read(handle)
        assert _names_file(str(caught.value), path), \
            f"the error does not name the truncated file {path}: {caught.value}"
        with expect_error(CorruptStateError, 'read_range within the missing half of a truncated stream must fail with a CorruptStateError') as caught:
            access.restore_streams().read_range(handle, handle.size - 100, 100)
        assert _names_file(str(caught.value), path), \
            f"the read_range error does not name the truncated file {path}: {caught.value}"

    def test_missing_file_is_a_restore_error_naming_it(self, access):
        handle, _ = self.write_file(access, 1)
        path = self.delete(handle)
        for read in (lambda s: s.read(handle), lambda s: s.read_range(handle, 0, 10)):
            with expect_error(RestoreError, 'reading a stream whose stored bytes were deleted must fail with a RestoreError naming it') as caught:
                read(access.restore_streams())
            assert _names_file(str(caught.value), path), \
                f"the error does not name the missing file {path}: {caught.value}"

    @pytest.mark.parametrize("garbage", [b"\x00\xffnot json{", b'{"valid": "json", "but": "no metadata"}', b""],
                             ids=["binary", "foreign-json", "empty"])
    def test_corrupt_metadata_is_a_clear_error(self, access, garbage):
        pointer = access.commit(1, garbage)
        with expect_error(CorruptStateError, "parsing metadata that is not statekit's must fail with a CorruptStateError"):
            CheckpointMetadata.from_bytes(access.read_metadata(pointer))
        with expect_error(CorruptStateError, "a coordinator starting on a checkpoint whose metadata is not statekit's must fail with a CorruptStateError") as caught:
            CheckpointStore(access)  # a coordinator starting on it
        assert pointer.external_pointer in str(caught.value), \
            f"the error does not name the checkpoint {pointer.external_pointer}: {caught.value}"


# ---------------------------------------------------------------------------- ownership


class StorageOwnershipTests(StorageTestBase):
    """The owner record every run of a job writes when it starts and reads back before each commit."""

    def test_owner_record_round_trip(self, access):
        assert access.read_owner() is None, f"a new job has an owner record: {access.read_owner()!r}"
        access.write_owner(b'{"run": 1}')
        assert access.read_owner() == b'{"run": 1}', "read_owner returns other bytes than were written"
        access.write_owner(b'{"run": 2}')
        assert access.read_owner() == b'{"run": 2}', "write_owner did not replace the record"
        assert access.completed() == [], f"the owner record shows up as a checkpoint: {access.completed()}"

    def test_owner_record_is_seen_by_a_new_access(self, checkpoint_storage, access):
        self.require_durable(checkpoint_storage)
        access.write_owner(b"owner")
        assert checkpoint_storage.create_access(self.job_id).read_owner() == b"owner", \
            "a new access reads another owner record"

    def test_a_fenced_run_commits_and_removes_nothing(self, access):
        first = JobOwnership(access, self.job_id, BOUNDED)
        first_store = CheckpointStore(access, ownership=first)
        first.begin_epoch(first_store.latest())
        second = JobOwnership(access, self.job_id, BOUNDED)  # a second run of the job starts: it takes over
        second_store = CheckpointStore(access, ownership=second)
        second.begin_epoch(second_store.latest())
        fenced = write_stream(access.streams(1, SUBTASK), payload(self.file_payload_size, 1))
        kept = write_stream(access.streams(1, "conformance-op-1"), payload(self.file_payload_size, 2))
        with expect_error(JobOwnershipError, 'a run whose ownership was taken over must not commit') as caught:
            first_store.add(make_metadata(1, [fenced]))
        assert second.run.run_id in str(caught.value), f"the error does not name the new owner: {caught.value}"
        first_store.abort(1)  # the fenced run's cleanup must not remove the owner's files of the same epoch
        assert is_readable(access, kept), "a fenced run's abort removed a file of the run that owns the job"
        second_store.add(make_metadata(1, [kept]))
        assert ids(access.completed()) == [1], f"completed after the owner's commit: {ids(access.completed())}"


# ---------------------------------------------------------------------------- IO errors


class StorageErrorTests(StorageTestBase):
    """Bad locations and failed IO are clear errors that name the setting or the file."""

    @pytest.fixture
    def unwritable_checkpoint_storage(self, checkpoint_storage: CheckpointStorage, tmp_path: Path
                                      ) -> tuple[Callable[[], CheckpointStorage], str]:
        """A factory of the storage pointed at a location it cannot write, and the setting its
        error must name: from the storage's test support (``unwritable_location``)."""
        cls = type(checkpoint_storage)
        found = self.support.unwritable_location(tmp_path)
        if found is None:
            pytest.skip(f"{cls.__name__} has no location to get wrong ({type(self.support).__name__}."
                        f"unwritable_location() is None)")
        location, setting = found
        return lambda: location.create(cls), setting

    def test_unwritable_location_fails_at_start_naming_the_setting(self, unwritable_checkpoint_storage):
        create, setting = unwritable_checkpoint_storage
        with expect_error(ConfigurationError, 'a storage pointed at a location it cannot write must fail when the job starts, with a ConfigurationError') as caught:
            create().create_access(self.job_id)
        assert setting in str(caught.value), f"the error does not name the setting {setting}: {caught.value}"

    def test_reading_a_file_that_was_never_written_is_a_restore_error(self, access):
        missing = FileStateHandle("chk-1/never-written", 10, checksum(b"0123456789"))
        with expect_error(RestoreError, 'reading a handle whose bytes were never written must fail with a RestoreError'):
            access.restore_streams().read(missing)

    def test_metadata_of_an_unknown_checkpoint_is_a_restore_error(self, access):
        with expect_error(RestoreError, 'reading the metadata of a checkpoint that was never committed must fail with a RestoreError'):
            access.read_metadata(CompletedCheckpointPointer(42, "chk-42"))

    def test_write_after_close_is_a_snapshot_error(self, access):
        out = access.streams(1, SUBTASK).create_output()
        out.write(b"abc")
        out.close_and_get_handle()
        with expect_error(SnapshotError, 'writing to a stream after close_and_get_handle() must fail with a SnapshotError'):
            out.write(b"more")


# ---------------------------------------------------------------------------- durability


class StorageDurabilityTests(StorageTestBase):
    """Files on this machine's disk survive an OS crash once a handle or a commit names them (each
    file fsynced, then the directory that names it), and a commit killed at any point leaves no
    checkpoint that looks complete with torn metadata. These tests watch what the storage does
    through Python's ``open`` and ``os`` (``local_disk``); a storage that writes no file on this
    machine's file system (an object store, a remote file system, memory) skips them, saying so."""

    def _skip_unless_local(self, touched: bool, unwatched: list[str], what: str) -> None:
        name = type(self.storage_under_test).__name__
        if unwatched:
            pytest.skip(f"{name} wrote {unwatched[0]} {what} through code the suite cannot watch (not Python's open "
                        f"or os: a native library such as SQLite): its durability is that library's (e.g. SQLite's "
                        f"journal and synchronous setting), and is not tested here")
        if not touched:
            pytest.skip(f"{name} wrote no file on this machine's file system {what}: what makes its bytes durable "
                        f"is its store's (an object store's PUT, a remote file system's close)")

    def test_files_are_on_the_disk_before_a_handle_or_the_commit_names_them(self, checkpoint_storage, access,
                                                                           tmp_path):
        self.require_durable(checkpoint_storage)
        sources = []
        for move in (False, True):
            source = tmp_path / f"native-{move}.sst"
            source.write_bytes(payload(self.file_payload_size, 60 + move))
            sources.append((source, move))
        before = files_under(str(tmp_path))
        with DiskRecorder() as disk:
            streams = access.streams(1, SUBTASK)
            handles = [write_stream(streams, payload(self.file_payload_size, 62)),
                       write_stream(streams, payload(self.file_payload_size, 63), StateScope.SHARED, name="shared-63"),
                       *(streams.upload_file(str(source), StateScope.SHARED, source.name, move)
                         for source, move in sources)]
            written = disk.problems()
            streams_touched, renamed_before = disk.touched, len(disk.unsynced_renames)
            access.commit(1, make_metadata(1, handles).to_bytes())
            committed = disk.problems()
        self._skip_unless_local(disk.touched, unwatched_writes(str(tmp_path), before, disk.files),
                                "for streams or a commit")
        assert not written, (
            f"a stream's handle may go into a _metadata as soon as it is returned, so its file must be on the disk by "
            f"then: fsync the file, then its directory (and a new directory's parent); not so: {'; '.join(written[:4])}")
        renamed = disk.unsynced_renames[renamed_before:]
        assert not renamed, (
            f"commit() renamed {renamed[0][0]} to {renamed[0][1]} before its bytes were fsynced: after an OS crash the "
            f"new name may hold an empty or partial file (write, fsync, rename, fsync the directory)")
        assert not committed, (
            f"once commit() returns the checkpoint is complete, and an OS crash must not lose it "
            f"({'the streams wrote files' if streams_touched else 'no stream wrote a file'}); not on the disk: "
            f"{'; '.join(committed[:4])}")

    def test_a_commit_killed_at_any_point_leaves_no_torn_checkpoint(self, checkpoint_storage, tmp_path):
        """The commit runs in a new process, killed (no cleanup runs) after each file it opens for
        writing and before each rename, in turn; then the checkpoint is not complete, or complete with
        all its metadata, and committing it again (the replayed epoch) succeeds."""
        self.require_durable(checkpoint_storage)

        def metadata_of(job: str) -> bytes:
            return make_metadata(7, [InlineStateHandle(payload(300, 7))], job_id=job).to_bytes()

        probe = f"{self.job_id}-crash-probe"
        probe_access = checkpoint_storage.create_access(probe)
        before = files_under(str(tmp_path))
        points, seen = crash_points(lambda: probe_access.commit(7, metadata_of(probe)))
        self._skip_unless_local(bool(points), unwatched_writes(str(tmp_path), before, seen), "when it committed")
        for index, point in enumerate(points):
            job = f"{self.job_id}-crash-{index}"
            metadata = metadata_of(job)
            killed = commit_killed_at(checkpoint_storage, job, 7, metadata, index)
            assert killed.returncode == KILLED, (
                f"a commit in a new process was to be killed {point}, but it exited with code {killed.returncode} "
                f"(the same commit took another path): {killed.stderr[-2000:]}")
            fresh = checkpoint_storage.create_access(job)
            for pointer in fresh.completed():
                found = fresh.read_metadata(pointer)
                assert found == metadata, (
                    f"a commit killed {point} left checkpoint {pointer.checkpoint_id} looking complete with "
                    f"{len(found)} bytes of metadata, not the {len(metadata)} committed: the metadata must appear "
                    f"whole or not at all (write it under another name, fsync it, rename it into place)")
            fresh.commit(7, metadata)
            latest = fresh.latest_completed()
            assert ids(fresh.completed()) == [7] and latest is not None and fresh.read_metadata(latest) == metadata, (
                f"after a commit killed {point}, committing checkpoint 7 again (its epoch replayed) left "
                f"{ids(fresh.completed())} with other metadata")


class StorageTests(StorageCommitTests, StorageRetentionTests, StorageOwnershipTests, StorageCorruptionTests,
                   StorageErrorTests, StorageDurabilityTests):
    """The whole storage level."""


__all__ = [
    "MultiStreamKeyedHandle", "StorageCommitTests", "StorageCorruptionTests", "StorageDurabilityTests", "StorageErrorTests",
    "StorageOwnershipTests", "StorageRetentionTests", "StorageTestBase", "StorageTests", "make_metadata", "payload",
    "write_stream",
]
