"""RecordSerializer: schema'd values (dataclasses, Rows, StructTypes) round-trip with their types,
refuse what the schema does not hold naming the field, and keep state on every backend; the
state reader returns them as struct columns."""
from __future__ import annotations

import dataclasses
import datetime
import decimal
import pickle
import re
from typing import Optional

import msgpack
import pytest
from hypothesis import given, strategies as st
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType, DecimalType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampNTZType,
)

from statekit import KeyedProcessFunction, ListStateDescriptor, ValueStateDescriptor
from statekit.registry import backend_class
from statekit.runtime import LocalRunner
from statekit.spi import SnapshotFormat
from statekit.serializers.record import RecordSerializer
from statekit.spi.errors import ConfigurationError, SerializationError

UTC = datetime.timezone.utc


@dataclasses.dataclass
class Position:
    lat: float
    lon: float
    label: Optional[str] = None


@dataclasses.dataclass
class Session:
    user: str
    clicks: int
    started: datetime.datetime
    day: datetime.date
    pages: list[str]
    per_page: dict[str, int]
    amount: Optional[decimal.Decimal]
    where: Position
    trail: list[Position]


def a_session(**changes) -> Session:
    value = Session("ann", 3, datetime.datetime(2026, 11, 28, 9, 30, 15, 250000, tzinfo=UTC), datetime.date(2026, 11, 28),
                    ["home", "cart"], {"home": 2, "cart": 1}, decimal.Decimal("19.990000000000000000"),
                    Position(52.5, 13.4, "Berlin"), [Position(1.0, 2.0)])
    return dataclasses.replace(value, **changes)


def test_a_dataclass_round_trips_with_its_nested_dataclasses():
    serializer = RecordSerializer(Session)
    value = a_session()
    data = serializer.serialize(value)
    assert serializer.deserialize(data) == value
    assert type(serializer.deserialize(data).where) is Position


def test_the_schema_comes_from_the_type_hints():
    schema = RecordSerializer(Session).spark_type()
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in schema.fields] == [
        ("user", "string", False), ("clicks", "bigint", False), ("started", "timestamp", False),
        ("day", "date", False), ("pages", "array<string>", False), ("per_page", "map<string,bigint>", False),
        ("amount", "decimal(38,18)", True), ("where", "struct<lat:double,lon:double,label:string>", False),
        ("trail", "array<struct<lat:double,lon:double,label:string>>", False)]


def test_values_are_a_positional_msgpack_array_named_by_no_class():
    """Language-neutral: any msgpack reader gets the fields in schema order, after the generation."""
    data = RecordSerializer(Position).serialize(Position(1.5, -2.0, None))
    assert msgpack.unpackb(data) == [0, 1.5, -2.0, None]
    assert b"Position" not in RecordSerializer(Session).serialize(a_session())
    assert len(RecordSerializer(Session).serialize(a_session())) < len(pickle.dumps(a_session())) / 3


def test_the_same_bytes_read_as_rows_without_the_dataclass():
    data = RecordSerializer(Session).serialize(a_session())
    as_rows = RecordSerializer(RecordSerializer(Session).spark_type()).deserialize(data)
    assert isinstance(as_rows, Row) and as_rows.where == Row(lat=52.5, lon=13.4, label="Berlin")
    assert as_rows.asDict()["started"] == a_session().started


@pytest.mark.parametrize("value", [
    Row(lat=1.0, lon=2.0, label="x"), Row(label="x", lon=2.0, lat=1.0), {"lat": 1.0, "lon": 2.0, "label": "x"},
    Position(1.0, 2.0, "x")])
def test_rows_dicts_and_objects_are_written_alike(value):
    serializer = RecordSerializer(Position)
    assert serializer.deserialize(serializer.serialize(value)) == Position(1.0, 2.0, "x")


def test_a_serializer_from_a_struct_type_equals_one_from_the_dataclass():
    """Equal schemas write equal bytes: a state may switch between a dataclass and Rows as it is."""
    from_class, from_struct = RecordSerializer(Position), RecordSerializer(RecordSerializer(Position).spark_type())
    assert from_class == from_struct and from_class.snapshot() == from_struct.snapshot()
    restored = from_class.snapshot().restore_serializer()
    assert restored == from_class and restored.deserialize(from_class.serialize(Position(1, 2))) == Row(
        lat=1.0, lon=2.0, label=None)


def test_a_serializer_pickles_with_its_record_type():
    serializer = pickle.loads(pickle.dumps(RecordSerializer(Session)))
    assert serializer.deserialize(serializer.serialize(a_session())) == a_session()


@pytest.mark.parametrize("value, message", [
    (a_session(clicks="3"), "field clicks: expected an int (bigint), got str"),
    (a_session(clicks=True), "field clicks: expected an int (bigint), got bool"),
    (a_session(clicks=2 ** 63), "field clicks: expected an int within bigint's range"),
    (a_session(user=None), "field user is NOT NULL in the schema"),
    (a_session(where=Position(None, 1.0)), "field where.lat is NOT NULL in the schema"),
    (a_session(trail=[Position(1.0, "east")]), "field trail[].lon: expected a float, got str"),
    (a_session(per_page={"home": None}), "field per_page{value} is NOT NULL"),
    (a_session(started=datetime.datetime(2026, 1, 1)), "field started: expected a datetime with a time zone"),
    (a_session(day=datetime.datetime(2026, 1, 1, tzinfo=UTC)), "field day: expected a datetime.date"),
    (a_session(amount=decimal.Decimal("1E+21")), "field amount: expected a Decimal that decimal(38,18) holds"),
    (a_session(amount=decimal.Decimal("0.1234567890123456789")), "holds without rounding"),
    ({"user": "ann"}, "field clicks is missing from the value"),
    (("ann", 3), "a plain tuple has no names"),
    (None, "not None"),
])
def test_a_value_the_schema_does_not_hold_is_refused_naming_the_field(value, message):
    with pytest.raises(SerializationError, match=re.escape(message)):
        RecordSerializer(Session).serialize(value)


def test_bytes_of_another_schema_are_a_clear_error():
    data = RecordSerializer(Position).serialize(Position(1.0, 2.0))
    with pytest.raises(SerializationError, match="no record of this schema"):
        RecordSerializer(Session).deserialize(data)
    with pytest.raises(SerializationError, match="cannot decode"):
        RecordSerializer(Session).deserialize(b"\xc1")


def test_integer_widths_decimals_past_64_bits_and_timestamp_ntz():
    schema = StructType([StructField("small", IntegerType(), False), StructField("big", DecimalType(38, 10), True),
                         StructField("local", TimestampNTZType(), False),
                         StructField("nested", MapType(LongType(), ArrayType(StringType(), True)), True)])
    serializer = RecordSerializer(schema)
    value = Row(small=-(2 ** 31), big=decimal.Decimal("-1234567890123456789012345678.0123456789"),
                local=datetime.datetime(1, 1, 1, 0, 0), nested={-5: ["a", None]})
    assert serializer.deserialize(serializer.serialize(value)) == value
    with pytest.raises(SerializationError, match=r"field small: expected an int within int's range"):
        serializer.serialize(value.asDict() | {"small": 2 ** 31})
    with pytest.raises(SerializationError, match="field local: expected a naive datetime"):
        serializer.serialize(value.asDict() | {"local": datetime.datetime(2026, 1, 1, tzinfo=UTC)})


@given(st.builds(Position, st.floats(allow_nan=False), st.floats(allow_nan=False), st.none() | st.text()))
def test_positions_round_trip(value):
    serializer = RecordSerializer(Position)
    assert serializer.deserialize(serializer.serialize(value)) == value


@given(st.datetimes(timezones=st.just(UTC)), st.dates())
def test_timestamps_and_dates_round_trip_to_the_microsecond(instant, day):
    serializer = RecordSerializer(StructType.fromJson({"type": "struct", "fields": [
        {"name": "t", "type": "timestamp", "nullable": False, "metadata": {}},
        {"name": "d", "type": "date", "nullable": False, "metadata": {}}]}))
    assert serializer.deserialize(serializer.serialize({"t": instant, "d": day})) == Row(t=instant, d=day)


def test_a_schema_that_is_not_one_is_refused():
    @dataclasses.dataclass
    class WithSet:
        tags: set[str]

    with pytest.raises(ConfigurationError, match=r"field WithSet.tags has type set\[str\]"):
        RecordSerializer(WithSet)
    with pytest.raises(ConfigurationError, match="a record schema is a StructType, a DDL string or a dataclass"):
        RecordSerializer(int)


class Sessions(KeyedProcessFunction):
    """Keeps each user's Session as a record, and emits its clicks."""

    def open(self, ctx):
        self.session = ctx.get_state(ValueStateDescriptor("session", RecordSerializer(Session)))

    def process(self, row, ctx):
        session = self.session.value() or a_session(user=ctx.current_key, clicks=0, pages=[])
        session.clicks += 1
        session.pages.append(row["page"])
        self.session.update(session)
        yield ctx.current_key, session.clicks, ",".join(session.pages), session.where


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
@pytest.mark.parametrize("checkpoint_format", [SnapshotFormat.CANONICAL, SnapshotFormat.NATIVE])
def test_record_state_is_kept_by_every_backend_across_a_restore_and_rescale(backend, checkpoint_format, tmp_path):
    rows = [{"user": user, "page": page} for page in ("a", "b") for user in ("ann", "bob", "cid", "dan")]
    first = LocalRunner(Sessions(), lambda row: row["user"], parallelism=2, max_parallelism=128,
                        state_backend=backend_class(backend)(), local_dir=str(tmp_path / "first"),
                        checkpoint_format=checkpoint_format)
    first.run_epoch(rows[:4])
    second = LocalRunner(Sessions(), lambda row: row["user"], parallelism=3, max_parallelism=128,
                         state_backend=backend_class(backend)(), local_dir=str(tmp_path / "second"),
                         checkpoint_format=checkpoint_format)
    second.restore_from(first.latest_metadata(), first.streams)
    assert sorted(second.run_epoch(rows[4:])) == [
        (user, 2, "a,b", Position(52.5, 13.4, "Berlin")) for user in ("ann", "bob", "cid", "dan")]


class LastPlace(KeyedProcessFunction):
    """Keeps each key's last Position under a TTL."""

    def open(self, ctx):
        from statekit.spi.descriptors import StateTtlConfig

        self.place = ctx.get_state(ValueStateDescriptor("place", RecordSerializer(Position),
                                                        ttl=StateTtlConfig(ttl_seconds=3600)))

    def process(self, row, ctx):
        previous = self.place.value()
        self.place.update(Position(row["lat"], row["lon"]))
        yield ctx.current_key, previous


def test_a_restored_heap_state_with_ttl_reads_as_its_dataclass():
    rows = [{"key": k, "lat": 1.0, "lon": 2.0} for k in ("a", "b")]
    first = LocalRunner(LastPlace(), lambda row: row["key"], parallelism=1, max_parallelism=128)
    first.run_epoch(rows)
    second = LocalRunner(LastPlace(), lambda row: row["key"], parallelism=1, max_parallelism=128)
    second.restore_from(first.latest_metadata(), first.streams)
    assert sorted(second.run_epoch(rows)) == [("a", Position(1.0, 2.0)), ("b", Position(1.0, 2.0))]


@dataclasses.dataclass
class ProfileV1:
    user: str
    visits: int
    score: int
    legacy: str


@dataclasses.dataclass
class ProfileV2:
    """v1 with ``legacy`` removed, ``score`` widened to a float, ``tier`` added with a default,
    and the fields reordered."""

    score: float
    user: str
    visits: int
    tier: str = "basic"
    tags: list[str] = dataclasses.field(default_factory=list)


class Profiles(KeyedProcessFunction):
    """Keeps a profile per user with the record class it is given; emits the profile it found."""

    def __init__(self, record_class, make):
        self.record_class, self.make = record_class, make

    def open(self, ctx):
        self.profile = ctx.get_state(ValueStateDescriptor("profile", RecordSerializer(self.record_class)))
        self.history = ctx.get_state(ListStateDescriptor("history", RecordSerializer(self.record_class)))

    def process(self, row, ctx):
        found = self.profile.value()
        self.profile.update(self.make(ctx.current_key, found))
        self.history.add(self.make(ctx.current_key, None))
        yield ctx.current_key, found, list(self.history.get())


USERS = ("ann", "bob", "cid", "dan", "eve")


def v1(user, found):
    return ProfileV1(user, (found.visits if found else 0) + 1, len(user), f"old-{user}")


def v2(user, found):
    return ProfileV2(float(len(user)) / 2, user, (found.visits if found else 0) + 1)


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
@pytest.mark.parametrize("checkpoint_format,incremental", [(SnapshotFormat.CANONICAL, False),
                                                           (SnapshotFormat.NATIVE, False),
                                                           (SnapshotFormat.CANONICAL, True),
                                                           (SnapshotFormat.NATIVE, True)])
def test_a_changed_record_schema_is_migrated_on_restore(backend, checkpoint_format, incremental, tmp_path):
    """Two epochs with ProfileV1 state, then the code changes to ProfileV2: the job restores (at
    another parallelism) and reads every value migrated, value and list state alike."""
    rows = [{"user": user} for user in USERS]

    def runner(function, parallelism, name):
        return LocalRunner(function, lambda row: row["user"], parallelism=parallelism, max_parallelism=128,
                           state_backend=backend_class(backend)(), local_dir=str(tmp_path / name),
                           checkpoint_format=checkpoint_format, incremental=incremental)

    first = runner(Profiles(ProfileV1, v1), 2, "v1")
    first.run_epoch(rows)
    first.run_epoch(rows)
    second = runner(Profiles(ProfileV2, v2), 3, "v2")
    second.restore_from(first.latest_metadata(), first.streams)
    found = {user: (profile, history) for user, profile, history in second.run_epoch(rows)}
    for user in USERS:
        profile, history = found[user]
        assert profile == ProfileV2(float(len(user)), user, 2, "basic", []), user
        assert history == [ProfileV2(float(len(user)), user, 1)] * 2 + [ProfileV2(len(user) / 2, user, 1)], user
    third = runner(Profiles(ProfileV2, v2), 3, "v2-again")
    third.restore_from(second.latest_metadata(), second.streams)
    assert {user: profile.visits for user, profile, _ in third.run_epoch(rows)} == {user: 3 for user in USERS}


@dataclasses.dataclass
class ProfileWithTextScore:
    user: str
    visits: int
    score: str
    legacy: str


@dataclasses.dataclass
class ProfileWithRequiredField:
    user: str
    visits: int
    score: int
    legacy: str
    region: str


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("record_class, message", [
    (ProfileWithTextScore, "field score was bigint and is string"),
    (ProfileWithRequiredField, "field region (string NOT NULL) was added without a default"),
])
def test_an_incompatible_record_schema_is_refused_naming_the_field(backend, record_class, message, tmp_path):
    from statekit.spi.errors import IncompatibleSerializerError

    rows = [{"user": user} for user in USERS]
    first = LocalRunner(Profiles(ProfileV1, v1), lambda row: row["user"], parallelism=1, max_parallelism=128,
                        state_backend=backend_class(backend)(), local_dir=str(tmp_path / "v1"))
    first.run_epoch(rows)
    second = LocalRunner(Profiles(record_class, v1), lambda row: row["user"], parallelism=1, max_parallelism=128,
                         state_backend=backend_class(backend)(), local_dir=str(tmp_path / "v2"))
    second.restore_from(first.latest_metadata(), first.streams)
    with pytest.raises(IncompatibleSerializerError, match=re.escape(message)) as refused:
        second.run_epoch(rows)
    assert "state 'profile'" in str(refused.value)


def test_widening_back_is_refused():
    assert RecordSerializer(ProfileV1).incompatibility(RecordSerializer(ProfileV2).snapshot()) == \
        "field score was double and is bigint, which holds not every value it held"


class SparkReadings(KeyedProcessFunction):
    """Keeps a reading per sensor with the record class it is given (the conformance suite's,
    which the executors import); emits what it found."""

    def __init__(self, record_class):
        self.record_class = record_class

    def open(self, ctx):
        self.reading = ctx.get_state(ValueStateDescriptor("reading", RecordSerializer(self.record_class)))

    def process(self, row, ctx):
        from statekit.conformance_tests.migration import ReadingV1

        found = self.reading.value()
        count = (found.count if found else 0) + 1
        self.reading.update(ReadingV1(ctx.current_key, count, count * 10, "celsius") if self.record_class is ReadingV1
                            else self.record_class(float(count * 10), ctx.current_key, count))
        yield (ctx.current_key, found.count if found else None, float(found.total) if found else None,
               getattr(found, "source", None))


class SparkProfiles(Profiles):
    """Profiles over a DataFrame's rows: emits the visits, the score and the tags it found."""

    def process(self, row, ctx):
        for user, found, history in super().process(row, ctx):
            yield user, found.visits if found else None, float(found.score) if found else None, \
                getattr(found, "tags", None), len(history)


@pytest.mark.spark
def test_a_spark_job_migrates_a_dataclass_of_the_driver_to_its_defaults(spark, statekit_settings, tmp_path):
    """The dataclasses travel to the executors pickled by value, as a driver script's do: the
    field that ProfileV2 adds takes its default_factory's value there too."""
    import sys

    from pyspark import cloudpickle

    from statekit.spark import process_keyed

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    statekit_settings({"checkpoint.storage": "filesystem", "parallelism": 2,
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "local.dir": str(tmp_path / "local")})
    users = spark.createDataFrame([(user,) for user in USERS], "user string")
    output = "user string, visits long, score double, tags array<string>, history int"
    process_keyed(users, "user", SparkProfiles(ProfileV1, v1), output, job_id="profiles").collect()
    found = process_keyed(users, "user", SparkProfiles(ProfileV2, v2), output, job_id="profiles").collect()
    assert sorted(map(tuple, found)) == [(user, 1, float(len(user)), [], 2) for user in sorted(USERS)]


@pytest.mark.spark
@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_a_spark_job_restores_its_changed_record_schema_migrated(spark, statekit_settings, backend, tmp_path):
    """Two epochs with ReadingV1 state, then ReadingV2 (a field removed, one widened, one added
    with a default, reordered): the third epoch, at another parallelism, reads every value migrated."""
    import sys

    from pyspark import cloudpickle

    from statekit.conformance_tests.migration import ReadingV1, ReadingV2
    from statekit.spark import process_keyed

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    statekit_settings({"backend": backend, "checkpoint.storage": "filesystem", "parallelism": 2,
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "local.dir": str(tmp_path / "local")})
    sensors = spark.createDataFrame([(user,) for user in USERS], "sensor string")
    output = "sensor string, count long, total double, source string"
    for _ in range(2):
        process_keyed(sensors, "sensor", SparkReadings(ReadingV1), output, job_id="readings").collect()
    statekit_settings({"parallelism": 3})
    found = process_keyed(sensors, "sensor", SparkReadings(ReadingV2), output, job_id="readings").collect()
    assert sorted(map(tuple, found)) == [(sensor, 2, 20.0, "migrated") for sensor in sorted(USERS)]
