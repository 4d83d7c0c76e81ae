"""Serializers: round trips, bulk paths, snapshots, compatibility and clear errors."""
import math
import pickle
import threading

import pytest
from hypothesis import given, strategies as st

from statekit.serializers import (
    BytesSerializer, Float64Serializer, Int64Serializer, MsgpackSerializer, PickleSerializer,
    StringSerializer, resolve, serializer_by_name,
)
from statekit.spi import Compatibility, ConfigurationError, SerializationError, SerializerSnapshot
from statekit.spi.errors import IncompatibleSerializerError
from statekit.spi.serializer import check_compatibility

ALL = [PickleSerializer(), MsgpackSerializer(), Int64Serializer(), Float64Serializer(), StringSerializer(),
       BytesSerializer()]


@given(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1))
def test_int64_round_trip(value):
    s = Int64Serializer()
    assert s.deserialize(s.serialize(value)) == value
    assert s.serialize_many([value]) == [s.serialize(value)]


@given(st.lists(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1), min_size=2, max_size=20))
def test_int64_bytes_sort_like_numbers(values):
    s = Int64Serializer()
    assert sorted(values) == [s.deserialize(b) for b in sorted(s.serialize(v) for v in values)]


@given(st.floats(allow_nan=False))
def test_float64_round_trip(value):
    s = Float64Serializer()
    assert s.deserialize(s.serialize(value)) == value


def test_float64_nan():
    s = Float64Serializer()
    assert math.isnan(s.deserialize(s.serialize(float("nan"))))


@given(st.text())
def test_string_round_trip(value):
    s = StringSerializer()
    assert s.deserialize(s.serialize(value)) == value


@given(st.recursive(st.none() | st.booleans() | st.integers(min_value=-(2 ** 63), max_value=2 ** 64 - 1)
                    | st.text() | st.binary(), lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=20))
def test_msgpack_round_trip(value):
    s = MsgpackSerializer()
    assert s.deserialize(s.serialize(value)) == value


def test_pickle_round_trips_objects():
    s = PickleSerializer()
    value = {"a": (1, 2.5, "x", b"y", frozenset({3})), "nested": [{"deep": None}]}
    assert s.deserialize(s.serialize(value)) == value
    assert s.deserialize_many(s.serialize_many([1, "a"])) == [1, "a"]


@pytest.mark.parametrize("serializer,value", [
    (PickleSerializer(), threading.Lock()),
    (MsgpackSerializer(), object()),
    (Int64Serializer(), "12"),
    (Int64Serializer(), 2 ** 63),
    (Float64Serializer(), "x"),
    (StringSerializer(), b"bytes"),
    (BytesSerializer(), "text"),
], ids=["pickle-lock", "msgpack-object", "int64-str", "int64-overflow", "float64-str", "string-bytes",
        "bytes-str"])
def test_unserializable_value_is_a_clear_error(serializer, value):
    with pytest.raises(SerializationError, match=type(value).__name__):
        serializer.serialize(value)


def test_int64_bulk_overflow_is_a_clear_error():
    with pytest.raises(SerializationError, match="64-bit"):
        Int64Serializer().serialize_many([1, 2 ** 64])


@pytest.mark.parametrize("serializer,data", [
    (PickleSerializer(), b"not a pickle"), (MsgpackSerializer(), b"\xc1"), (Int64Serializer(), b"123"),
    (Float64Serializer(), b"1")])
def test_undecodable_bytes_are_a_clear_error(serializer, data):
    with pytest.raises(SerializationError):
        serializer.deserialize(data)


@pytest.mark.parametrize("serializer", ALL, ids=lambda s: type(s).__name__)
def test_snapshot_restores_an_equal_serializer(serializer):
    snapshot = serializer.snapshot()
    assert SerializerSnapshot.from_json(snapshot.to_json()) == snapshot
    restored = snapshot.restore_serializer()
    assert restored == serializer
    assert serializer.resolve_compatibility(snapshot) is Compatibility.COMPATIBLE_AS_IS
    assert pickle.loads(pickle.dumps(serializer)) == serializer


def test_different_serializers_are_incompatible():
    with pytest.raises(IncompatibleSerializerError, match=r"'count'.*StringSerializer.*Int64Serializer"):
        check_compatibility("count", "value", StringSerializer(), Int64Serializer().snapshot())


def test_pickle_reads_any_protocol():
    assert PickleSerializer(5).resolve_compatibility(PickleSerializer(4).snapshot()) is Compatibility.COMPATIBLE_AS_IS


def test_unimportable_serializer_snapshot_names_the_package():
    from statekit.spi import RestoreError
    with pytest.raises(RestoreError, match="nonexistent_pkg.ser:Thing"):
        SerializerSnapshot("nonexistent_pkg.ser:Thing", 1).restore_serializer()


def test_resolve_and_names():
    assert resolve(None) == PickleSerializer()
    assert serializer_by_name("int64") == Int64Serializer()
    with pytest.raises(ConfigurationError, match="accepted"):
        serializer_by_name("avro")
    with pytest.raises(ConfigurationError, match="TypeSerializer"):
        resolve("pickle")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="protocol"):
        PickleSerializer(99)
