"""Serializers: round trips, bulk paths, snapshots, compatibility and clear errors."""
import datetime
import decimal
import math
import pickle
import threading

import pytest
from hypothesis import given, strategies as st

from statekit.backends.common.key_layout import deserialize_list, encode_list
from statekit.conformance_tests.base import open_keyed_backend, set_key
from statekit.registry import backend_class
from statekit.serializers import (
    BytesSerializer, Float64Serializer, Int64Serializer, MsgpackSerializer, PickleSerializer,
    StringSerializer, resolve, serializer_by_name,
)
from statekit.spi import (
    Compatibility, ConfigurationError, SerializationError, SerializerSnapshot, ValueStateDescriptor,
)
from statekit.spi.errors import IncompatibleSerializerError, UntrustedCheckpointError
from statekit.spi.serializer import TypeSerializer, byte_equality_types, check_compatibility, compatibility, trusting
from statekit.windows.time_window import TimeWindow, TimeWindowSerializer

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


def test_pickle_bulk_error_names_the_value_type():
    with pytest.raises(SerializationError, match="cannot pickle a value of type lock"):
        PickleSerializer().serialize_many(iter([1, threading.Lock()]))
    assert PickleSerializer().serialize_many(iter([1, "a"])) == [PickleSerializer().serialize(v) for v in (1, "a")]


def test_int64_bulk_overflow_is_a_clear_error():
    with pytest.raises(SerializationError, match="64-bit"):
        Int64Serializer().serialize_many([1, 2 ** 64])


@pytest.mark.parametrize("kind", ["int64", "int32", "uint8", "uint64"])
def test_int64_takes_numpy_integers_on_every_path(kind):
    """A NumPy integer (what a batch function reads from its columns) is the int it holds on every
    path: ``np.int64(5) + 2**63`` overflows in NumPy, so ``serialize`` failed with a bare
    OverflowError while ``serialize_arrow`` took the same value."""
    import numpy as np

    serializer = Int64Serializer()
    values = [np.dtype(kind).type(v) for v in (0, 5, 100)]
    expected = [serializer.serialize(int(v)) for v in values]
    assert [serializer.serialize(v) for v in values] == expected
    assert serializer.serialize_many(values) == expected
    assert serializer.serialize_many(iter(values)) == expected
    assert serializer.serialize_arrow(values).to_pylist() == expected
    assert serializer.deserialize_many(expected) == [0, 5, 100]


def test_int64_numpy_integer_out_of_range_is_a_clear_error():
    import numpy as np

    with pytest.raises(SerializationError, match=r"cannot encode .*\(uint64\)"):
        Int64Serializer().serialize(np.uint64(2 ** 64 - 1))
    with pytest.raises(SerializationError, match=r"cannot encode .*9223372036854775808\)? \(uint64\): it takes 64-bit "
                                                 r"integers, from -9223372036854775808 to 9223372036854775807"):
        Int64Serializer().serialize_many([np.int64(1), np.uint64(2 ** 63)])  # names the value


@pytest.mark.parametrize("serializer,data", [
    (PickleSerializer(), b"not a pickle"), (MsgpackSerializer(), b"\xc1"), (Int64Serializer(), b"123"),
    (Float64Serializer(), b"1"), (StringSerializer(), b"caf\xe9")])
def test_undecodable_bytes_are_a_clear_error(serializer, data):
    with pytest.raises(SerializationError):
        serializer.deserialize(data)


@pytest.mark.parametrize("serializer", ALL, ids=lambda s: type(s).__name__)
def test_snapshot_restores_an_equal_serializer(serializer):
    snapshot = serializer.snapshot()
    assert SerializerSnapshot.from_json(snapshot.to_json()) == snapshot
    with trusting(True):  # pickle's: recreated only for a trusted checkpoint
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


class Launcher:
    """Not a serializer, with a from_config that would do what a checkpoint's author wants."""

    launched: list = []

    @classmethod
    def from_config(cls, config):
        cls.launched.append(config)
        return cls()


@pytest.mark.parametrize("identity", [f"{__name__}:Launcher", "builtins:print", "os:system"])
def test_a_serializer_snapshot_naming_no_serializer_class_calls_nothing(identity):
    """A checkpoint names its states' serializer classes; restoring calls from_config of a
    TypeSerializer class only, never of another object the checkpoint names."""
    from statekit.spi import RestoreError
    with pytest.raises(RestoreError, match="is no TypeSerializer class"):
        SerializerSnapshot(identity, 1, {"command": "touch /tmp/owned"}).restore_serializer()
    assert Launcher.launched == []


class FieldsSerializer(TypeSerializer[list]):
    """A serializer whose config holds a tuple (JSON gives it back as a list)."""

    def __init__(self, fields=("a", "b")):
        self.fields = fields

    def serialize(self, value):
        return repr(value).encode()

    def deserialize(self, data):
        return data

    def config(self):
        return {"fields": self.fields, "nested": {"pair": (1, 2)}}


def test_serializer_with_a_tuple_in_its_config_reads_its_own_checkpoint():
    """Checkpoint metadata is JSON, where a tuple comes back a list: the restored snapshot must
    still equal the serializer's own, or the same serializer is refused as incompatible."""
    import json

    serializer = FieldsSerializer()
    restored = SerializerSnapshot.from_json(json.loads(json.dumps(serializer.snapshot().to_json())))
    assert restored == serializer.snapshot()
    check_compatibility("state", "value", FieldsSerializer(), restored)


class RenamedArgSerializer(TypeSerializer[bytes]):
    VERSION = 2

    def __init__(self, width=8):
        self.width = width

    def serialize(self, value):
        return value

    def deserialize(self, data):
        return data

    def config(self):
        return {"width": self.width}


def test_serializer_that_cannot_be_recreated_from_its_checkpointed_config_is_a_restore_error():
    from statekit.spi import RestoreError
    old = SerializerSnapshot(f"{__name__}:RenamedArgSerializer", 1, {"size": 8})
    with pytest.raises(RestoreError, match=r"RenamedArgSerializer.*version 1.*'size': 8.*from_config"):
        old.restore_serializer()


def test_resolve_and_names():
    assert resolve(None) == MsgpackSerializer()
    assert serializer_by_name("int64") == Int64Serializer()
    with pytest.raises(ConfigurationError, match="accepted"):
        serializer_by_name("avro")
    with pytest.raises(ConfigurationError, match="TypeSerializer"):
        resolve("pickle")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="protocol"):
        PickleSerializer(99)


@pytest.mark.parametrize("serializer, values", [(Int64Serializer(), [-(2 ** 63), -5, 0, 2 ** 63 - 1]),
                                                (Float64Serializer(), [-0.5, 0.0, 3.25, float("inf")])],
                         ids=["int64", "float64"])
def test_fixed_width_values_read_at_a_step(serializer, values):
    """``deserialize_strided`` (own and the default over ``deserialize_many``) and list cells read
    at a fixed step; a cell whose elements are not all ``FIXED_SIZE`` bytes is decoded one by one."""
    cell = encode_list(serializer.serialize_many(values))
    assert serializer.deserialize_strided(cell, 1, 9) == values
    assert TypeSerializer.deserialize_strided(serializer, cell, 1, 9) == values
    assert deserialize_list(cell, serializer) == values
    for elements in ([serializer.serialize(values[0]), b"1234567"], [b"1234567", b"123456789"]):  # 18 = 2 * 9
        with pytest.raises(SerializationError, match="expects 8 bytes"):
            deserialize_list(encode_list(elements), serializer)
    with pytest.raises(TypeError, match="no FIXED_SIZE"):
        StringSerializer().deserialize_strided(cell, 1, 9)


@pytest.mark.parametrize("count", [1, 2, 63, 64, 65, 200])
@pytest.mark.parametrize("serializer, value_of", [(Int64Serializer(), lambda i: (i - 100) * 2 ** 56 + i),
                                                  (Float64Serializer(), lambda i: i / 3 - 7)],
                         ids=["int64", "float64"])
def test_list_cells_of_any_length_read_at_a_step(serializer, value_of, count):
    """List cells of up to 64 fixed-width values are read by one ``Struct`` each, longer ones value by
    value: both give the values, as does a read from another start or at another step."""
    values = [value_of(i) for i in range(count)]
    cell = encode_list(serializer.serialize_many(values))
    assert serializer.deserialize_strided(cell, 1, 9) == values == deserialize_list(cell, serializer)
    assert serializer.deserialize_strided(cell[:-1] + b"\x00", 1, 9)[:-1] == values[:-1]  # any bytes
    padded = b"".join(b"ab" + serializer.serialize(v) for v in values)
    assert serializer.deserialize_strided(padded, 2, 10) == values
    with pytest.raises(SerializationError, match="expects 8 bytes"):
        deserialize_list(cell[:-1], serializer)  # the last element one byte short


@pytest.mark.parametrize("value", [3, b"bytes", "lone \ud800 surrogate"])
def test_string_serialize_many_names_a_value_that_does_not_encode(value):
    """``serialize_many`` encodes all values at once; a value that does not encode is named as by
    ``serialize``, from a list or from an iterator alike."""
    s = StringSerializer()
    assert s.serialize_many(iter(["a", "é"])) == s.serialize_many(("a", "é")) == ["a".encode(), "é".encode()]
    for values in (["a", value, "b"], iter(["a", value, "b"])):
        with pytest.raises(SerializationError, match=r"StringSerializer cannot encode"):
            s.serialize_many(values)


@pytest.mark.parametrize("serializer", [Int64Serializer(), Float64Serializer()], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("value", [True, False])
def test_numeric_serializers_reject_bool(serializer, value):
    """``True`` is an int to Python, but it would come back as 1: a clear error naming the fix."""
    name = type(serializer).__name__
    with pytest.raises(SerializationError, match=rf"{name} cannot encode {value} \(bool\).*int\({value}\)"):
        serializer.serialize(value)
    with pytest.raises(SerializationError, match=rf"{name} cannot encode {value} \(bool\)"):
        serializer.serialize_many(iter([1, value, 2]))


def test_int64_bool_in_state_fails_the_checkpoint_instead_of_restoring_a_number():
    from statekit import KeyedProcessFunction, ValueStateDescriptor
    from statekit.runtime import LocalRunner

    class StoresFlag(KeyedProcessFunction):
        def open(self, ctx):
            self.flag = ctx.get_state(ValueStateDescriptor("flag", Int64Serializer()))

        def process(self, row, ctx):
            self.flag.update(True)

    runner = LocalRunner(StoresFlag(), key_selector=lambda row: row, parallelism=1)
    with pytest.raises(SerializationError, match="Int64Serializer cannot encode True"):
        runner.run_epoch(["a"])
    assert runner.latest_metadata() is None


tuples = st.recursive(st.none() | st.booleans() | st.integers(min_value=-(2 ** 63), max_value=2 ** 64 - 1)
                      | st.text() | st.binary(),
                      lambda c: st.lists(c) | st.tuples(c, c) | st.lists(c).map(tuple)
                      | st.dictionaries(st.text() | st.tuples(st.integers(0, 9), st.text()), c), max_leaves=20)


@given(tuples)
def test_msgpack_keeps_tuples(value):
    s = MsgpackSerializer()
    back = s.deserialize(s.serialize(value))
    assert back == value and repr(back) == repr(value)  # repr tells tuples from lists


def test_msgpack_snapshot_writer_and_task_threads_share_one_serializer(monkeypatch):
    """A snapshot is written on its own thread (``serialize_many``, through ``serialize_arrow``) while
    the task may go on serializing with the same instance. msgpack's ``Packer`` fills one buffer and
    calls back into Python (``default``, for a tuple) half way through a value, where threads switch:
    the snapshot thread's values then reset the buffer under the task's, which lost its first bytes.
    Here the snapshot's call runs at exactly that point, in the callback."""
    from statekit.serializers import msgpack as module

    serializer = MsgpackSerializer()
    snapshot_values = [[i, ("nested", i)] for i in range(3)]
    written: list[list[bytes]] = []
    pack = module._pack

    def pack_while_a_snapshot_is_written(value):
        monkeypatch.setattr(module, "_pack", pack)  # once
        written.append(serializer.serialize_arrow(snapshot_values).to_pylist())
        return pack(value)

    monkeypatch.setattr(module, "_pack", pack_while_a_snapshot_is_written)
    value = ["key", (1, 2)]
    assert serializer.deserialize(serializer.serialize(value)) == value
    assert serializer.deserialize_many(written[0]) == snapshot_values


def test_msgpack_serialize_many_of_an_iterator_names_the_bad_value():
    with pytest.raises(SerializationError, match="set"):
        MsgpackSerializer().serialize_many(iter([1, (2, 3), {4}]))
    serializer = MsgpackSerializer()
    assert serializer.serialize_many(iter([1, (2, 3)])) == [serializer.serialize(v) for v in (1, (2, 3))]


def test_msgpack_subclasses_come_back_as_their_base_type():
    from collections import OrderedDict, namedtuple
    from enum import IntEnum

    class Level(IntEnum):
        HIGH = 3

    point = namedtuple("Point", "x y")
    s = MsgpackSerializer()
    back = s.deserialize(s.serialize([point(1, 2), OrderedDict(a=1), Level.HIGH, bytearray(b"ab")]))
    assert back == [(1, 2), {"a": 1}, 3, b"ab"]
    assert [type(v) for v in back] == [tuple, dict, int, bytes]


def test_msgpack_reads_state_written_by_version_1():
    import msgpack

    written_by_version_1 = msgpack.packb({"pair": (1, 2), "n": [3]}, use_bin_type=True)  # tuples were arrays
    assert MsgpackSerializer().deserialize(written_by_version_1) == {"pair": [1, 2], "n": [3]}
    version_1 = SerializerSnapshot("statekit.serializers.msgpack:MsgpackSerializer", 1)
    assert MsgpackSerializer().resolve_compatibility(version_1) is Compatibility.COMPATIBLE_AS_IS
    newer = SerializerSnapshot("statekit.serializers.msgpack:MsgpackSerializer", MsgpackSerializer.VERSION + 1)
    assert MsgpackSerializer().resolve_compatibility(newer) is Compatibility.INCOMPATIBLE


def test_msgpack_unknown_extension_type_is_a_clear_error():
    import msgpack

    with pytest.raises(SerializationError, match="unknown msgpack extension type 7"):
        MsgpackSerializer().deserialize(msgpack.packb(msgpack.ExtType(7, b"x")))


@pytest.mark.parametrize("serializer,values", [
    (Int64Serializer(), [0, -1, 2**63 - 1, -2**63, 5]), (StringSerializer(), ["a", "héllo", ""]),
    (BytesSerializer(), [b"", b"xy", bytearray(b"z")]), (PickleSerializer(), [1, "a", None]),
    (Int64Serializer(), []), (StringSerializer(), [])])
def test_serialize_arrow_is_serialize_many_as_a_column(serializer, values):
    import pyarrow as pa
    column = serializer.serialize_arrow(values)
    assert column.type == pa.binary() and column.to_pylist() == serializer.serialize_many(values)


@pytest.mark.parametrize("serializer,values", [
    (Int64Serializer(), [1, 2**63]), (Int64Serializer(), [1, True]), (Int64Serializer(), [1, None]),
    (Int64Serializer(), [1, 1.5]), (StringSerializer(), ["a", "\ud800"]), (StringSerializer(), ["a", b"x"]),
    (StringSerializer(), ["a", None]), (BytesSerializer(), [b"a", "x"])])
def test_serialize_arrow_rejects_what_serialize_rejects(serializer, values):
    with pytest.raises(SerializationError):
        serializer.serialize_arrow(values)


def test_int64_bulk_decode_matches_single_and_rejects_a_wrong_width():
    s = Int64Serializer()
    values = [0, -1, 2 ** 63 - 1, -(2 ** 63)]
    assert s.deserialize_many(s.serialize_many(values)) == values
    with pytest.raises(SerializationError, match="8 bytes"):
        s.deserialize_many([s.serialize(1), b"123"])


@pytest.mark.parametrize("serializer, values", [
    (PickleSerializer(), [1, "a", (2, b"x")]), (MsgpackSerializer(), [1, "a", [2, b"x"]]),
    (Int64Serializer(), [-(2 ** 63), 0, 7]), (Float64Serializer(), [-1.5, 0.0, math.inf]),
    (StringSerializer(), ["", "key", "é", type("Text", (str,), {"encode": lambda self, *a: b"other"})("sub")]),
    (BytesSerializer(), [b"", b"\x00x"])], ids=lambda p: type(p).__name__ if isinstance(p, TypeSerializer) else "")
def test_unchecked_serializer_gives_the_bytes_of_serialize(serializer, values):
    """The hot paths' serializer (set_current_key of the KV backends) and the bulk one write
    exactly what ``serialize`` writes: state written through one is found through the others. A
    str subclass with an ``encode`` of its own is encoded as text by all three."""
    unchecked = serializer.unchecked_serializer()
    expected = [serializer.serialize(v) for v in values]
    assert [unchecked(v) for v in values] == expected
    assert serializer.serialize_many(values) == expected


@pytest.mark.parametrize("backend_name", ["heap", "rocksdb", "lmdb"])
@pytest.mark.parametrize("key", [3, b"bytes", "lone \ud800 surrogate"])
def test_string_key_that_does_not_encode_fails_with_the_serializers_error(tmp_path, backend_name, key):
    """With string keys, a key that is not text is rejected by StringSerializer's own error (the
    KV backends encode keys unchecked, then serialize a rejected key again for the error), and
    the next key works as before."""
    options = {} if backend_name == "heap" else {"local-dir": str(tmp_path)}
    backend = open_keyed_backend(backend_class(backend_name)(**options), str(tmp_path),
                                 key_serializer=StringSerializer())
    try:
        state = backend.get_state(ValueStateDescriptor("v", Int64Serializer()))
        set_key(backend, "good")
        state.update(1)
        backend.set_current_key(key, backend.key_group_range.start)
        if backend_name != "heap":  # the heap backend serializes keys only in snapshots
            with pytest.raises(SerializationError, match=r"StringSerializer cannot encode"):
                state.update(2)
        set_key(backend, "good")
        assert state.value() == 1
    finally:
        backend.dispose()


#: values of the types serializers declare in ``BYTE_EQUALITY_TYPES``
_EQUALITY_SAMPLES = {int: [0, 1, -1, 2 ** 40, 2 ** 63 - 1, -(2 ** 63)], str: ["", "a", "ab", "ünï", "1"],
                     bytes: [b"", b"a", b"ab", b"\x00", b"1"], TimeWindow: [TimeWindow(0, 10), TimeWindow(0, 11),
                                                                          TimeWindow(-5, 10), TimeWindow(1, 2)]}


@pytest.mark.parametrize("serializer", ALL + [TimeWindowSerializer()], ids=lambda s: type(s).__name__)
def test_declared_byte_equality_types_keep_python_equality_and_byte_equality_one(serializer):
    """What the heap relies on to hold values of the declared types as themselves: two values are
    equal exactly when their bytes are, and each reads back as an equal value of its own type."""
    declared = byte_equality_types(serializer)
    values = [v for t in declared for v in _EQUALITY_SAMPLES[t]]
    for a in values:
        back = serializer.deserialize(serializer.serialize(a))
        assert type(back) is type(a) and back == a, f"{a!r} reads back as {back!r}"
        for b in values:
            assert (a == b) == (serializer.serialize(a) == serializer.serialize(b)), (a, b)


def test_byte_equality_types_are_not_inherited():
    """A subclass may write other bytes: it declares its own types or has none."""

    class Subclass(PickleSerializer):
        pass

    assert byte_equality_types(PickleSerializer()) == {int, str, bytes}
    assert byte_equality_types(Subclass()) == frozenset()
    assert byte_equality_types(Float64Serializer()) == frozenset()  # 0.0 == -0.0 in Python, not in bytes


SPARK_ATOMS = [datetime.date(2026, 11, 28), datetime.date(1, 1, 1), datetime.datetime(2026, 11, 28, 13, 5, 1, 7),
               datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.timezone.utc),
               decimal.Decimal("1.50"), decimal.Decimal("-0E-18"), decimal.Decimal("12345678901234567890.1234")]


@pytest.mark.parametrize("value", SPARK_ATOMS, ids=repr)
def test_msgpack_holds_spark_atomic_values_by_type(value):
    """Dates, datetimes and decimals round-trip with their type (a decimal with its exponent), also
    nested; an aware datetime comes back as the same instant, in UTC."""
    s = MsgpackSerializer()
    for held in (value, (value, [value]), {"at": value}):
        back = s.deserialize(s.serialize(held))
        assert back == held and repr(back) == repr(held)
    offset = datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert s.deserialize(s.serialize(offset)) == offset
    assert s.deserialize(s.serialize(offset)).tzinfo == datetime.timezone.utc


def test_msgpack_version_3_reads_what_version_2_wrote():
    written = SerializerSnapshot("statekit.serializers.msgpack:MsgpackSerializer", 2)
    assert MsgpackSerializer().resolve_compatibility(written) is Compatibility.COMPATIBLE_AS_IS


def test_a_schemaless_serializers_state_migrates_to_any_other():
    """A state pickle or msgpack wrote is migrated (each value read and written again) by a serializer of
    another class, and the values come back as the new one reads them; a schema'd one's is refused."""
    assert compatibility(MsgpackSerializer(), PickleSerializer().snapshot()) is Compatibility.COMPATIBLE_AFTER_MIGRATION
    assert compatibility(Int64Serializer(), MsgpackSerializer().snapshot()) is Compatibility.COMPATIBLE_AFTER_MIGRATION
    assert compatibility(MsgpackSerializer(), Int64Serializer().snapshot()) is Compatibility.INCOMPATIBLE
    assert MsgpackSerializer().migrate((1, [2]), PickleSerializer()) == (1, [2])
    with pytest.raises(SerializationError, match="set"):
        MsgpackSerializer().migrate({1}, PickleSerializer())


def test_pickle_is_recreated_from_a_checkpoint_only_where_trusted():
    """Restoring PickleSerializer from a snapshot (so as to read what it wrote) needs a trusting scope;
    the error names the setting. Scopes nest: an untrusting one inside a trusting one still trusts."""
    snapshot = PickleSerializer().snapshot()
    with pytest.raises(UntrustedCheckpointError, match="spark.statekit.restore.trust-pickle"):
        snapshot.restore_serializer()
    with trusting(True), trusting(False):
        assert snapshot.restore_serializer() == PickleSerializer()
    with pytest.raises(UntrustedCheckpointError):
        snapshot.restore_serializer()
    assert MsgpackSerializer().snapshot().restore_serializer() == MsgpackSerializer()
