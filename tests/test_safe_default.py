"""The safe default: state is written by msgpack or the serializer of its declared type, never by
pickle unless asked for by name; a checkpoint's pickles are read only where it is trusted, so a
crafted payload in an untrusted checkpoint runs nothing."""
from __future__ import annotations

import dataclasses
import datetime
import decimal
import os

import pytest

from statekit.cli import main as cli
from statekit.registry import backend_class
from statekit.runtime.function import KeyedProcessFunction
from statekit.runtime.local_runner import LocalRunner
from statekit.serializers import (
    Float64Serializer, Int64Serializer, PickleSerializer, StringSerializer, declared_serializers,
)
from statekit.serializers.key_columns import KeyColumnsSerializer
from statekit.serializers.record import RecordSerializer
from statekit.spi import ConfigurationError, ListStateDescriptor, MapStateDescriptor, SerializationError
from statekit.spi.backend import SnapshotFormat
from statekit.spi.descriptors import ValueStateDescriptor
from statekit.spi.errors import IncompatibleSerializerError, UntrustedCheckpointError
from statekit.storage.filesystem import FileSystemCheckpointStorage

BACKENDS = ["heap", "rocksdb", "lmdb"]


@dataclasses.dataclass
class Visit:
    page: str
    seconds: float = 0.0


def test_a_declared_type_chooses_its_schemad_serializer():
    assert declared_serializers(ValueStateDescriptor("n", type=int)) == {"value": Int64Serializer()}
    assert declared_serializers(ListStateDescriptor("v", type=Visit)) == {"value": RecordSerializer(Visit)}
    assert declared_serializers(MapStateDescriptor("m", key_type=str, value_type=float)) == {
        "user_key": StringSerializer(), "value": Float64Serializer()}
    assert declared_serializers(ValueStateDescriptor("any")) == {"value": None}  # the default: msgpack
    with pytest.raises(ConfigurationError, match="both a value serializer and a type"):
        ValueStateDescriptor("n", Int64Serializer(), type=int)
    with pytest.raises(ConfigurationError, match=r"state 'n' \(value\) declares type .*set"):
        declared_serializers(ValueStateDescriptor("n", type=set))


class TypedVisits(KeyedProcessFunction):
    """Every kind of declaration: a type, the default, a type per map role."""

    def open(self, ctx):
        self.visits = ctx.get_state(ListStateDescriptor("visits", type=Visit))
        self.last = ctx.get_state(ValueStateDescriptor("last"))
        self.seconds = ctx.get_state(MapStateDescriptor("seconds", key_type=str, value_type=float))

    def process(self, row, ctx):
        self.visits.add(Visit(row["page"], row["seconds"]))
        self.last.update((row["page"], row["at"]))
        self.seconds.put(row["page"], (self.seconds.get(row["page"]) or 0.0) + row["seconds"])
        yield ctx.current_key, len(list(self.visits.get())), self.last.value(), dict(self.seconds.items())


@pytest.mark.parametrize("backend", BACKENDS)
def test_typed_and_default_state_restores_and_reads_as_written(backend, tmp_path):
    """Dataclass records, msgpack tuples of dates and decimals, typed map entries and date-typed keys
    survive a restore at another parallelism on every backend; the checkpoint holds no pickle."""
    at = datetime.date(2026, 11, 28)
    rows = [{"user": user, "page": page, "seconds": 1.5, "at": at} for page in ("a", "b") for user in ("ann", "bob")]
    first = LocalRunner(TypedVisits(), lambda row: row["user"], parallelism=2, state_backend=backend_class(backend)(),
                        local_dir=str(tmp_path / "first"))
    first.run_epoch(rows[:2])
    second = LocalRunner(TypedVisits(), lambda row: row["user"], parallelism=3,
                         state_backend=backend_class(backend)(), local_dir=str(tmp_path / "second"))
    second.restore_from(first.latest_metadata(), first.streams)
    assert sorted(second.run_epoch(rows[2:])) == [
        (user, 2, ("b", at), {"a": 1.5, "b": 1.5}) for user in ("ann", "bob")]
    metas = second.latest_metadata().operator("keyed-process").states()
    assert {name: meta.serializers["value"]["identity"].rpartition(":")[2] for name, meta in metas.items()} == {
        "visits": "RecordSerializer", "last": "MsgpackSerializer", "seconds": "Float64Serializer"}
    assert "Pickle" not in second.latest_metadata().to_bytes().decode()


def test_key_columns_serializer_round_trips_every_key_type():
    values = {"string": "é", "binary": b"\x00", "int": -7, "bigint": 2 ** 62, "smallint": 3, "tinyint": -1,
              "boolean": True, "float": 1.5, "double": -0.25, "date": datetime.date(1969, 7, 20),
              "timestamp": datetime.datetime(2026, 1, 1, 12, 0, 0, 1, tzinfo=datetime.timezone.utc),
              "timestamp_ntz": datetime.datetime(2026, 1, 1, 12), "decimal(10,2)": decimal.Decimal("-12.50")}
    for type_name, value in values.items():
        one = KeyColumnsSerializer([type_name])
        assert repr(one.deserialize(one.serialize(value))) == repr(value)
        assert one.deserialize(one.serialize(None)) is None
    several = KeyColumnsSerializer(list(values))
    key = tuple(values.values())
    assert several.deserialize(several.serialize(key)) == key
    with pytest.raises(SerializationError, match=r"key\[0\]: expected a str"):
        KeyColumnsSerializer(["string"]).serialize(5)
    with pytest.raises(SerializationError, match="tuple of 2 values"):
        KeyColumnsSerializer(["string", "int"]).serialize("a")
    with pytest.raises(ConfigurationError, match="not a key type"):
        KeyColumnsSerializer(["array<int>"])


class Counter(KeyedProcessFunction):
    """Counts per key in a state whose serializer the test chooses (None: undeclared)."""

    def __init__(self, serializer=None):
        self.serializer = serializer

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", self.serializer))

    def process(self, row, ctx):
        count = self.count.value()
        self.count.update((count or 0) + 1)
        yield ctx.current_key, self.count.value()


class Holder:
    """A value msgpack cannot write."""

    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, Holder) and other.n == self.n


class HolderCounter(Counter):
    def process(self, row, ctx):
        held = self.count.value()
        self.count.update(Holder((held.n if held else 0) + 1))
        yield ctx.current_key, self.count.value().n


@pytest.mark.parametrize("backend", BACKENDS)
def test_pickled_state_migrates_to_the_default_once_trusted(backend, tmp_path):
    """State pickle wrote (pickle by name, as the default was before) restores only where trusted; an
    undeclared state then migrates to msgpack, and keys stay pickled (keys are never migrated)."""
    first = LocalRunner(Counter(PickleSerializer()), lambda row: row, parallelism=2,
                        state_backend=backend_class(backend)(), local_dir=str(tmp_path / "first"),
                        key_serializer=PickleSerializer())
    first.run_epoch(["a", "b", "a"])

    def restored(function, **options):
        runner = LocalRunner(function, lambda row: row, parallelism=3, state_backend=backend_class(backend)(),
                             local_dir=str(tmp_path / f"next-{len(os.listdir(tmp_path))}"), **options)
        runner.restore_from(first.latest_metadata(), first.streams)
        return runner

    with pytest.raises(UntrustedCheckpointError, match="PickleSerializer"):
        restored(Counter()).run_epoch(["a"])
    migrated = restored(Counter(), trust_pickle=True)
    assert sorted(migrated.run_epoch(["a", "b"])) == [("a", 3), ("b", 2)]
    states = migrated.latest_metadata().operator("keyed-process").states()
    assert states["count"].serializers["value"]["identity"].endswith("MsgpackSerializer")
    key_serializers = {str(h.key_serializer_snapshot()) for s in migrated.latest_metadata().operator(
        "keyed-process").subtasks for h in s.keyed}
    assert key_serializers and all("PickleSerializer" in k for k in key_serializers)


def test_state_msgpack_cannot_hold_is_refused_with_the_fix(tmp_path):
    """A trusted pickled state of objects msgpack cannot write is refused when it would migrate, naming the
    state and both fixes; declared as pickle by name it restores as it was."""
    first = LocalRunner(HolderCounter(PickleSerializer()), lambda row: row, parallelism=1)
    first.run_epoch(["a"])
    refused = LocalRunner(HolderCounter(), lambda row: row, parallelism=1, trust_pickle=True)
    refused.restore_from(first.latest_metadata(), first.streams)
    with pytest.raises(IncompatibleSerializerError,
                       match=r"state 'count' cannot be migrated from PickleSerializer to MsgpackSerializer.*Holder.*"
                             r"type=.*PickleSerializer\(\)"):
        refused.run_epoch(["a"])
    kept = LocalRunner(HolderCounter(PickleSerializer()), lambda row: row, parallelism=1, trust_pickle=True)
    kept.restore_from(first.latest_metadata(), first.streams)
    assert kept.run_epoch(["a"]) == [("a", 2)]


class Payload:
    """Pickles to a call of ``os.mkdir(marker)``: what an attacker would put into a checkpoint."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)

    def __deepcopy__(self, memo):  # the heap holds a copy of what it is given: this very payload
        return self


class Planting(KeyedProcessFunction):
    """Writes a payload into pickled state, as a crafted checkpoint would hold it."""

    def __init__(self, marker):
        self.marker = marker

    def open(self, ctx):
        self.value = ctx.get_state(ValueStateDescriptor("count", PickleSerializer()))

    def process(self, row, ctx):
        self.value.update(Payload(self.marker))
        return ()


@pytest.mark.parametrize("planter, checkpoint_format, backend", [
    ("rocksdb", SnapshotFormat.CANONICAL, "heap"), ("heap", SnapshotFormat.NATIVE, "heap"),
    ("rocksdb", SnapshotFormat.CANONICAL, "rocksdb"), ("rocksdb", SnapshotFormat.NATIVE, "rocksdb"),
    ("lmdb", SnapshotFormat.NATIVE, "lmdb")])
def test_a_crafted_pickle_in_an_untrusted_checkpoint_runs_nothing(planter, checkpoint_format, backend, tmp_path):
    """A checkpoint holding a pickle payload (in a state's values, or as a native heap snapshot) is
    refused by a job with the default serializers before a byte of it is read: the payload's call
    never happens. The same checkpoint, trusted, does run it: the payload is real."""
    marker = str(tmp_path / "payload-ran")
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    planted = LocalRunner(Planting(marker), lambda row: row, parallelism=1,
                          state_backend=backend_class(planter)(), storage=storage, job_id="planted",
                          local_dir=str(tmp_path / "planted"), checkpoint_format=checkpoint_format)
    planted.run_epoch(["k"])
    assert not os.path.exists(marker)
    victim = LocalRunner(Counter(), lambda row: row, parallelism=1, state_backend=backend_class(backend)(),
                         job_id="victim", local_dir=str(tmp_path / "victim"))
    victim.restore_from(planted.latest_metadata(), planted.streams)
    with pytest.raises(UntrustedCheckpointError):
        victim.run_epoch(["k"])
    assert not os.path.exists(marker), "restoring the untrusted checkpoint ran its payload"
    job_dir = str(tmp_path / "checkpoints" / "planted")
    assert cli(["state", "get", job_dir, "--state", "count", "--key", "k"]) in (0, 2)
    assert cli(["savepoint", "create", "--from", job_dir, "--to", str(tmp_path / "savepoints")]) == 2
    assert not os.path.exists(marker), "reading the untrusted checkpoint ran its payload"
    trusting = LocalRunner(Counter(PickleSerializer()), lambda row: row, parallelism=1,
                           state_backend=backend_class(backend)(), job_id="trusting",
                           local_dir=str(tmp_path / "trusting"), trust_pickle=True)
    trusting.restore_from(planted.latest_metadata(), planted.streams)
    trusting.run_epoch(["k"])
    assert os.path.isdir(marker), "the payload, trusted, runs: the test's checkpoint is a real attack"


class UserCounter(Counter):
    """``Counter`` over a DataFrame's rows."""

    def process(self, row, ctx):
        yield from super().process(row, ctx)


@pytest.mark.spark
def test_a_spark_job_restores_pickled_state_only_when_trusted(spark, statekit_settings, tmp_path):
    """A checkpoint of pickled keys and values (as earlier statekit versions wrote by default) is refused by
    a Spark job on the driver, before any task runs, unless trusted; trusted, its values migrate to msgpack
    and its keys stay pickled."""
    import sys

    from pyspark import cloudpickle

    from statekit.spark import process_keyed

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    old = LocalRunner(UserCounter(PickleSerializer()), lambda row: row["user"], parallelism=2, job_id="old",
                      storage=FileSystemCheckpointStorage((tmp_path / "old").as_uri()), key_types=["string"],
                      key_serializer=PickleSerializer())
    old.run_epoch([{"user": "ann"}, {"user": "bob"}, {"user": "ann"}])
    statekit_settings({"checkpoint.storage": "filesystem", "checkpoint.dir": (tmp_path / "new").as_uri(),
                       "restore.path": (tmp_path / "old" / "old").as_uri(), "parallelism": 3,
                       "local.dir": str(tmp_path / "local")})
    users = spark.createDataFrame([("ann",), ("cid",)], "user string")
    with pytest.raises(UntrustedCheckpointError, match="PickleSerializer.*trust-pickle"):
        process_keyed(users, "user", UserCounter(), "user string, count long", job_id="new")
    statekit_settings({"restore.trust-pickle": "true"})
    found = process_keyed(users, "user", UserCounter(), "user string, count long", job_id="new").collect()
    assert sorted(map(tuple, found)) == [("ann", 3), ("cid", 1)]
