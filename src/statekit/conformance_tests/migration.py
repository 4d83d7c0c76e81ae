"""The migration level: state whose value serializer changed is migrated when it is restored.

A restored state registered with a value serializer that answers ``COMPATIBLE_AFTER_MIGRATION``
(here a record schema that gained a field with a default, lost one, reordered its fields and
widened an int to a double) holds every value migrated (``TypeSerializer.migrate``) before the
job reads it, from every snapshot format the backend declares, and writes them so in its next
snapshot. A change no migration covers is refused naming the field and both types, and keys,
namespaces and map keys are never migrated. No capability skips this level: a backend that
cannot migrate fails it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from statekit.conformance_tests.base import set_key
from statekit.conformance_tests.snapshot_support import SnapshotTestBase
from statekit.serializers import StringSerializer
from statekit.serializers.record import RecordSerializer
from statekit.spi.descriptors import (
    ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor, StateDescriptor, ValueStateDescriptor,
)
from statekit.spi.errors import IncompatibleSerializerError
from statekit.spi.key_groups import key_group_for_key

KEYS = range(300)


@dataclasses.dataclass
class ReadingV1:
    sensor: str
    count: int
    total: int
    unit: str


@dataclasses.dataclass
class ReadingV2:
    """``ReadingV1`` with ``unit`` removed, ``total`` widened to a float, ``source`` added with a
    default, and the fields reordered."""

    total: float
    sensor: str
    count: int
    source: str = "migrated"


@dataclasses.dataclass
class ReadingWithTextCount:
    sensor: str
    count: str
    total: int
    unit: str


def _larger(a: Any, b: Any) -> Any:
    return a if a.total >= b.total else b


def descriptors(record: type) -> dict[str, StateDescriptor]:
    serializer = RecordSerializer(record)
    return {"value": ValueStateDescriptor("latest", serializer), "list": ListStateDescriptor("history", serializer),
            "map": MapStateDescriptor("by-day", StringSerializer(), serializer),
            "reducing": ReducingStateDescriptor("largest", _larger, serializer)}


def v1(key: int, n: int) -> ReadingV1:
    return ReadingV1(f"sensor-{key}", n, key * 10 + n, "celsius")


def v1_as_v2(key: int, n: int) -> ReadingV2:
    return ReadingV2(float(key * 10 + n), f"sensor-{key}", n)


class MigrationTests(SnapshotTestBase):
    def _write_v1(self, backend: Any) -> None:
        """Every key of ``KEYS`` in the backend's key groups."""
        states = {kind: backend.get_state(d) for kind, d in descriptors(ReadingV1).items()}
        for key in KEYS:
            if key_group_for_key(key, backend.max_parallelism) not in backend.key_group_range:
                continue
            set_key(backend, key)
            states["value"].update(v1(key, 1))
            states["list"].add_all([v1(key, 1), v1(key, 2)])
            states["map"].put("monday", v1(key, 3))
            states["reducing"].add(v1(key, 1))
            states["reducing"].add(v1(key, 2))

    def _assert_v2(self, backend: Any, what: str) -> None:
        states = {kind: backend.get_state(d) for kind, d in descriptors(ReadingV2).items()}
        for key in KEYS:
            set_key(backend, key)
            found = {"value": states["value"].value(), "list": list(states["list"].get()),
                     "map": dict(states["map"].items()), "reducing": states["reducing"].get()}
            expected = {"value": v1_as_v2(key, 1), "list": [v1_as_v2(key, 1), v1_as_v2(key, 2)],
                        "map": {"monday": v1_as_v2(key, 3)}, "reducing": v1_as_v2(key, 2)}
            assert found == expected, f"{what}, key {key}: the migrated state is {found}, expected {expected}"

    def test_every_kind_of_state_is_migrated_on_restore_and_snapshotted_migrated(
            self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path):
        self._write_v1(keyed_backend)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        migrated = self._restore(state_backend, tmp_path, [handle], snapshot_streams, "migrated")
        try:
            self._assert_v2(migrated, "restored with the new record schema")
            again = migrated.snapshot(2, snapshot_options).write(snapshot_streams)
            migrated.notify_checkpoint_complete(2)
        finally:
            migrated.dispose()
        restored = self._restore(state_backend, tmp_path, [again], snapshot_streams, "again")
        try:
            self._assert_v2(restored, "restored from the snapshot taken after the migration")
        finally:
            restored.dispose()

    @pytest.mark.parametrize("kind", ["value", "list", "map", "reducing"])
    def test_a_change_no_migration_covers_is_refused_naming_the_field(
            self, state_backend, keyed_backend, snapshot_streams, snapshot_options, tmp_path, kind):
        self._write_v1(keyed_backend)
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            descriptor = descriptors(ReadingWithTextCount)[kind]
            with pytest.raises(IncompatibleSerializerError, match=f"'{descriptor.name}'.*field count was bigint "
                                                                  f"and is string"):
                restored.get_state(descriptor)
        finally:
            restored.dispose()

    def test_map_keys_are_never_migrated(self, state_backend, keyed_backend, snapshot_streams, snapshot_options,
                                         tmp_path):
        set_key(keyed_backend, 1)
        keyed_backend.get_state(MapStateDescriptor("keyed-by-record", RecordSerializer(ReadingV1),
                                                   StringSerializer())).put(v1(1, 1), "x")
        handle = keyed_backend.snapshot(1, snapshot_options).write(snapshot_streams)
        restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams)
        try:
            with pytest.raises(IncompatibleSerializerError, match="user keys are never migrated"):
                restored.get_state(MapStateDescriptor("keyed-by-record", RecordSerializer(ReadingV2), StringSerializer()))
        finally:
            restored.dispose()

    def test_snapshots_that_disagree_on_a_migrated_state_are_refused_together(self, state_backend, snapshot_options,
                                                                             snapshot_streams, tmp_path):
        """Subtask 0 registers the state (and migrates it), subtask 1 never does: restoring both
        into one subtask (a scale-down) finds values of two schemas under one state, and refuses
        instead of reading one with the other's serializer."""
        from statekit.spi.errors import RestoreError

        written = []
        for index in (0, 1):
            backend = self._restore(state_backend, tmp_path, [], snapshot_streams, f"v1-{index}",
                                    subtask_index=index, parallelism=2)
            try:
                self._write_v1(backend)
                written.append(backend.snapshot(1, snapshot_options).write(snapshot_streams))
            finally:
                backend.dispose()
        handles = []
        for index, handle in enumerate(written):
            restored = self._restore(state_backend, tmp_path, [handle], snapshot_streams, f"v2-{index}",
                                     subtask_index=index, parallelism=2)
            try:
                if index == 0:
                    restored.get_state(descriptors(ReadingV2)["value"])  # subtask 1 does not register it
                handles.append(restored.snapshot(2, snapshot_options).write(snapshot_streams))
            finally:
                restored.dispose()
        with pytest.raises(RestoreError, match="'latest' was written by other serializers"):
            self._restore(state_backend, tmp_path, handles, snapshot_streams, "merged").dispose()
