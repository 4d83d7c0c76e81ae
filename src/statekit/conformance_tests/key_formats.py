"""Snapshot level: the key format (``statekit.spi.key_format``) through snapshots and restores.

State written now stores an instant under the key serializer's bytes of the instant in UTC,
whichever time zone gave it, before and after a restore, in this backend and through a savepoint
in another. State written before the key format was recorded (keys as given, the key serializer
snapshot without ``key_format``) is restored as it was written: found under its keys as before,
and written on in that format.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from statekit.backends.common.canonical import read_key_groups
from statekit.conformance_tests.base import open_keyed_backend, requires, set_key
from statekit.conformance_tests.semantics.instants import INSTANT, ZONES, in_every_zone
from statekit.conformance_tests.snapshot_support import SnapshotTestBase
from statekit.spi import (
    KeyedStateBackend, KeyGroupsStateHandle, SnapshotOptions, SnapshotType, StateHandle, ValueStateDescriptor,
)
from statekit.spi.key_format import KEY_FORMAT, KEYS_AS_GIVEN, KeyBytes, read_key_serializer
from statekit.spi.key_groups import canonical_key
from statekit.spi.storage import CheckpointStreams
from statekit.storage.inline import InlineStreams

COUNT = ValueStateDescriptor("count")
SAVEPOINT = SnapshotOptions(SnapshotType.SAVEPOINT)
#: two instants in a zone other than UTC, as a job running in that session time zone gave them
EST = ZONES[2]
OLD_KEYS = (INSTANT.astimezone(EST), (INSTANT + dt.timedelta(hours=1)).astimezone(EST))


def keys_as_given(backend: KeyedStateBackend) -> KeyedStateBackend:
    """``backend`` (new, nothing restored) writing keys in format 1, as statekit did before it
    recorded the key format: what a checkpoint of that time holds."""
    backend.key_bytes = KeyBytes(backend.key_serializer, KEYS_AS_GIVEN)
    return backend


def old_savepoint(streams: CheckpointStreams, tmp_path: Any) -> StateHandle:
    """A savepoint of key ``OLD_KEYS[0]`` (count 1) written in key format 1 by the heap backend."""
    from statekit.backends.heap import HeapStateBackend

    old = keys_as_given(open_keyed_backend(HeapStateBackend(), str(tmp_path / "old")))
    try:
        add_one(old, OLD_KEYS[0])
        return old.snapshot(1, SAVEPOINT).write(streams)
    finally:
        old.dispose()


def key_format_of(handle: StateHandle) -> int:
    return read_key_serializer(handle.key_serializer_snapshot())[1]


def stored_keys(handle: StateHandle, streams: CheckpointStreams) -> set[bytes]:
    """The key bytes of the rows of a savepoint (a canonical snapshot)."""
    assert isinstance(handle, KeyGroupsStateHandle), f"a savepoint is a KeyGroupsStateHandle, got {type(handle)}"
    return {key for _, batch in read_key_groups(handle, streams, handle.key_group_range)
            for key in batch.column("key").to_pylist()}


def count_of(backend: KeyedStateBackend, key: Any) -> Any:
    set_key(backend, key)
    return backend.get_state(COUNT).value()


def add_one(backend: KeyedStateBackend, key: Any) -> None:
    set_key(backend, key)
    state = backend.get_state(COUNT)
    state.update((state.value() or 0) + 1)


class KeyFormatTests(SnapshotTestBase):
    conformance_level = "snapshots"

    def test_an_instant_is_one_key_through_a_restore(self, state_backend, keyed_backend, snapshot_streams,
                                                     snapshot_options, tmp_path):
        zoned = in_every_zone(INSTANT)
        add_one(keyed_backend, zoned[2])
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        assert key_format_of(handle) == KEY_FORMAT, f"new state must be written in key format {KEY_FORMAT}"
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            for key in zoned:
                add_one(restored, key)
            assert count_of(restored, zoned[0]) == 4, \
                f"one instant given in {len(ZONES)} time zones after a restore is one key: it reads " \
                f"{count_of(restored, zoned[0])!r}, expected 4"
            savepoint = restored.snapshot(2, SAVEPOINT).write(snapshot_streams)
        finally:
            restored.dispose()
        want = {keyed_backend.key_serializer.serialize(INSTANT)}
        assert stored_keys(savepoint, snapshot_streams) == want, \
            "a savepoint holds an instant under the key serializer's bytes of the instant in UTC"

    def test_a_nan_key_is_one_key_through_a_restore(self, state_backend, keyed_backend, snapshot_streams,
                                                    snapshot_options, tmp_path):
        """The runtime gives every NaN key as ``CANONICAL_NAN`` (``canonical_key``), alone or in a
        tuple key: the restored state must find it under that one object again (NaN != NaN)."""
        keys = [canonical_key(float("nan")), canonical_key((1, float("nan")))]
        for key in keys:
            add_one(keyed_backend, key)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            for key in keys:
                add_one(restored, key)
                assert count_of(restored, key) == 2, \
                    f"after a restore the NaN key {key!r} reads {count_of(restored, key)!r}, expected 2"
        finally:
            restored.dispose()

    def test_an_instant_is_one_key_through_a_backend_switch(self, state_backend, keyed_backend, snapshot_streams,
                                                            tmp_path):
        from statekit.backends.heap import HeapStateBackend

        zoned = in_every_zone(INSTANT)
        add_one(keyed_backend, zoned[1])
        handle = keyed_backend.snapshot(1, SAVEPOINT).write(snapshot_streams)
        heap = self._restore(HeapStateBackend(), tmp_path, [handle], snapshot_streams, name="heap")
        try:
            add_one(heap, zoned[2])
            back = heap.snapshot(2, SAVEPOINT).write(snapshot_streams)
        finally:
            heap.dispose()
        restored = self._restore(state_backend, tmp_path, [back], snapshot_streams)
        try:
            add_one(restored, zoned[0])
            assert count_of(restored, zoned[1]) == 3, \
                f"after switching to the heap backend and back, one instant reads {count_of(restored, zoned[1])!r}" \
                f" in another time zone, expected 3"
        finally:
            restored.dispose()

    def test_state_of_the_old_key_format_stays_reachable(self, state_backend, snapshot_streams, snapshot_options,
                                                         tmp_path):
        """A savepoint of a job that ran before the key format was recorded, in a session time zone
        other than UTC: its keys are found as they were given, and the state goes on in format 1."""
        handle = old_savepoint(snapshot_streams, tmp_path)
        assert key_format_of(handle) == KEYS_AS_GIVEN, "the old savepoint records no key format"
        backend = self._restore(state_backend, tmp_path, [handle], snapshot_streams, name="restored-1")
        try:
            assert count_of(backend, OLD_KEYS[0]) == 1, \
                f"state of the old key format is not found under its key: it reads {count_of(backend, OLD_KEYS[0])!r}"
            add_one(backend, OLD_KEYS[0])
            add_one(backend, OLD_KEYS[1])
            continued = backend.snapshot(2, snapshot_options).write(snapshot_streams)
            backend.notify_checkpoint_complete(2)
        finally:
            backend.dispose()
        assert key_format_of(continued) == KEYS_AS_GIVEN, \
            "state restored in the old key format must be written on in it (its snapshot records no key format)"
        self._assert_old_format_continued(state_backend, continued, snapshot_streams, tmp_path)

    def test_old_key_format_goes_on_after_local_recovery(self, state_backend, tmp_path):
        requires(state_backend, "local_recovery")
        streams, working = InlineStreams(), str(tmp_path / "working")
        backend = open_keyed_backend(state_backend, str(tmp_path / "local"),
                                     restore_handles=[old_savepoint(streams, tmp_path)],
                                     restore_streams=streams, working_dir=working)
        try:
            first = backend.snapshot(2, SnapshotOptions()).write(streams)
            backend.notify_checkpoint_complete(2)
        finally:
            backend.dispose()
        resumed = open_keyed_backend(state_backend, str(tmp_path / "local"), restore_handles=[first],
                                     restore_streams=streams, working_dir=working, resume_local_state=True)
        try:
            add_one(resumed, OLD_KEYS[0])
            add_one(resumed, OLD_KEYS[1])
            continued = resumed.snapshot(3, SnapshotOptions()).write(streams)
        finally:
            resumed.dispose()
        assert key_format_of(continued) == KEYS_AS_GIVEN, \
            "working state of the old key format, reopened by local recovery, must be written on in that format"
        self._assert_old_format_continued(state_backend, continued, streams, tmp_path)

    def _assert_old_format_continued(self, state_backend: Any, handle: StateHandle, streams: CheckpointStreams,
                                     tmp_path: Any) -> None:
        restored = self._restore(state_backend, tmp_path, [handle], streams, name="restored-2")
        try:
            got = [count_of(restored, key) for key in OLD_KEYS]
            assert got == [2, 1], f"state of the old key format written on and restored reads {got}, expected [2, 1]"
            savepoint = restored.snapshot(9, SAVEPOINT).write(streams)
        finally:
            restored.dispose()
        want = {restored.key_serializer.serialize(key) for key in OLD_KEYS}
        assert stored_keys(savepoint, streams) == want, \
            "state of the old key format must keep the bytes of its keys as given (time zone included)"


__all__ = ["KeyFormatTests", "keys_as_given"]
