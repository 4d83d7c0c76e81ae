"""The heap backend's native full checkpoints (``backends/heap/native_snapshot.py``) where the
conformance suite's snapshot levels, which run every mode against every backend, do not reach:
held values pickle cannot write, and other backends refusing the handle."""
import sys
import types

import pytest

from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.native_snapshot import NativeHeapStateHandle
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.base import open_keyed_backend, set_key
from statekit.spi import SnapshotFormat, SnapshotOptions, TypeSerializer, ValueStateDescriptor
from statekit.spi.errors import RestoreError, SnapshotError
from statekit.storage.inline import InlineStreams

NATIVE = SnapshotOptions(format=SnapshotFormat.NATIVE)


def _local_class() -> type:
    class Point:  # defined in a function: pickle cannot name it, a serializer of its own writes it
        def __init__(self, x: int) -> None:
            self.x = x
    return Point


Point = _local_class()


class PointSerializer(TypeSerializer):
    def serialize(self, value):
        return str(value.x).encode()

    def deserialize(self, data):
        return Point(int(data))


POINTS = ValueStateDescriptor("points", PointSerializer())
COUNT = ValueStateDescriptor("count")


def test_a_value_pickle_cannot_write_fails_the_native_checkpoint_naming_the_state_and_the_fix(tmp_path):
    backend = open_keyed_backend(HeapStateBackend(), str(tmp_path / "local"))
    try:
        for key in range(20):
            set_key(backend, key)
            backend.get_state(COUNT).update(key)
            backend.get_state(POINTS).update(Point(key))
        with pytest.raises(SnapshotError, match=r"state 'points' holds a value .* pickle cannot write .*"
                                                r"checkpoint.format=canonical"):
            backend.snapshot(1, NATIVE).write(InlineStreams())
        # the failed checkpoint released its view: the state goes on, and a canonical checkpoint holds it
        set_key(backend, 3)
        backend.get_state(POINTS).update(Point(30))
        streams = InlineStreams()
        handle = backend.snapshot(2).write(streams)
    finally:
        backend.dispose()
    restored = open_keyed_backend(HeapStateBackend(), str(tmp_path / "restored"), restore_handles=[handle],
                                  restore_streams=streams)
    try:
        set_key(restored, 3)
        assert restored.get_state(POINTS).value().x == 30
        assert restored.get_state(COUNT).value() == 3
    finally:
        restored.dispose()


@pytest.mark.parametrize("other", [RocksDBStateBackend, LMDBStateBackend])
def test_other_backends_refuse_a_native_heap_checkpoint_and_name_the_way_through_a_savepoint(tmp_path, other):
    backend = open_keyed_backend(HeapStateBackend(), str(tmp_path / "local"))
    streams = InlineStreams()
    try:
        set_key(backend, "a")
        backend.get_state(COUNT).update(1)
        handle = backend.snapshot(1, NATIVE).write(streams)
    finally:
        backend.dispose()
    assert isinstance(handle, NativeHeapStateHandle)
    with pytest.raises(RestoreError, match="NativeHeapStateHandle.*savepoint"):
        open_keyed_backend(other(), str(tmp_path / "other"), restore_handles=[handle], restore_streams=streams)


def test_a_value_whose_class_is_gone_where_the_job_restores_names_the_class_and_the_fix(tmp_path, monkeypatch):
    module = types.ModuleType("statekit_vanishing_values")

    class Reading:
        def __init__(self, value: int) -> None:
            self.value = value
    Reading.__module__ = module.__name__
    Reading.__qualname__ = "Reading"
    module.Reading = Reading
    monkeypatch.setitem(sys.modules, module.__name__, module)
    readings = ValueStateDescriptor("readings")
    backend = open_keyed_backend(HeapStateBackend(), str(tmp_path / "local"))
    streams = InlineStreams()
    try:
        set_key(backend, "a")
        backend.get_state(readings).update(Reading(7))
        handle = backend.snapshot(1, NATIVE).write(streams)
    finally:
        backend.dispose()
    monkeypatch.delitem(sys.modules, module.__name__)  # the executors that restore have no such module
    with pytest.raises(RestoreError, match=r"class cannot be loaded here .*statekit_vanishing_values.*"
                                           r"make its module importable.*savepoint or a canonical checkpoint"):
        open_keyed_backend(HeapStateBackend(), str(tmp_path / "restored"), restore_handles=[handle],
                           restore_streams=streams)
