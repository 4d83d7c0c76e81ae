"""``spark.read.format("statekit")``: a job's keyed state as a DataFrame (PySpark's Python data
source API).

::

    spark.read.format("statekit").load("s3://bucket/checkpoints/my-job")          # latest checkpoint
    spark.read.format("statekit").option("checkpoint-dir", "s3://bucket/checkpoints")
         .option("job", "my-job").option("checkpoint-id", 42).option("state", "count").load()

Options: the snapshot (``path``: a checkpoint, a savepoint, or a job directory for its latest
checkpoint; or ``checkpoint-dir`` + ``job`` [+ ``checkpoint-id``]), ``storage-options`` (fsspec
options as a JSON object, e.g. an S3 endpoint; credentials in the environment work too),
``operator`` (when the snapshot holds several) and ``state`` (one state, or several
comma-separated; default all).

Columns: the job's key columns, typed as the job's input had them (recorded in every checkpoint;
a snapshot without them has one ``key`` column holding the key as text), then ``key_group``,
``state``, ``kind``, ``namespace`` (text; null for the default namespace), ``user_key`` (a map
entry's key, a timer's timestamp), ``value`` (a value, a list element, a map value, an
accumulator), ``value_bytes`` (the value as stored), ``ttl_timestamp`` (a TTL entry's write time,
epoch ms) and ``error`` (why a part did not decode). With one ``state`` whose serializers are
typed (``Int64Serializer``, ``StringSerializer``, ...), ``user_key`` and ``value`` have its types;
otherwise they are text: JSON where the value is JSON, else its ``repr``.

The change feed between two checkpoints of a job, ``.option("changes-from", a).option("changes-to",
b)`` with the job's directory as the path, has the same columns plus ``change`` (``put``: the
cell's new value; ``delete``: its old value), as ``statekit.reading.changes`` computes them.

Each partition reads one subtask's key groups of the snapshot, on an executor. A filter that
fixes every key column (``key = ...`` or ``key IN (...)``) is pushed down: only those keys' key
groups are read. A filter on ``state`` decodes only those states.
"""
from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceReader, EqualNullSafe, EqualTo, Filter, In, InputPartition
from pyspark.sql.types import (
    ArrayType, BinaryType, DataType, DoubleType, LongType, MapType, StringType, StructType,
)

from statekit.reading.cells import StateCell, readable
from statekit.reading.changes import changes, check_same_job
from statekit.reading.snapshot_reader import KeyColumn, SnapshotReader, snapshot_url
from statekit.serializers import BytesSerializer, Float64Serializer, Int64Serializer, StringSerializer
from statekit.spi.descriptors import StateKind
from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import StateMetaInfo
from statekit.spi.serializer import SerializerSnapshot

NAME = "statekit"
#: the columns after the key columns
CELL_COLUMNS = ("key_group", "state", "kind", "namespace", "user_key", "value", "value_bytes", "ttl_timestamp",
                "error")
_CELL_TYPES = {"key_group": "int", "state": "string", "kind": "string", "namespace": "string",
               "value_bytes": "binary", "ttl_timestamp": "bigint", "error": "string"}
#: key column types for which a pushed-down key filter chooses the key group
EXACT_KEY_TYPES = frozenset({"string", "binary", "int", "bigint", "smallint", "tinyint", "boolean", "date"})
_TYPED: dict[type, DataType] = {Int64Serializer: LongType(), Float64Serializer: DoubleType(),
                                StringSerializer: StringType(), BytesSerializer: BinaryType()}


def _spark_type(snapshot: Any) -> DataType | None:
    """The Spark type of values of a serializer whose values all have one (None: text)."""
    try:
        serializer = SerializerSnapshot.from_json(snapshot).restore_serializer()
    except Exception:  # noqa: BLE001 - a serializer that cannot be restored here reads as text
        return None
    serializer = getattr(serializer, "inner", serializer)  # a TTL state's values
    spark_type = getattr(serializer, "spark_type", None)  # a schema'd serializer (RecordSerializer)
    return spark_type() if callable(spark_type) else _TYPED.get(type(serializer))


def ddl_type(data_type: DataType) -> str:
    """``data_type`` as DDL, field names quoted (``simpleString`` leaves them bare)."""
    if isinstance(data_type, StructType):
        fields = (f"`{f.name.replace('`', '``')}`: {ddl_type(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
                  for f in data_type.fields)
        return f"struct<{', '.join(fields)}>"
    if isinstance(data_type, ArrayType):
        return f"array<{ddl_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"map<{ddl_type(data_type.keyType)}, {ddl_type(data_type.valueType)}>"
    return data_type.simpleString()


@dataclass(frozen=True)
class SnapshotLocation:
    """A snapshot's URL and the fsspec options (credentials, endpoint) its file system needs."""

    url: str
    storage_options: dict[str, Any]
    #: decode state that runs code when read (pickle): option ``trust-pickle``
    trust_pickle: bool = False

    def open(self, url: str | None = None) -> SnapshotReader:
        """The snapshot (or another one, ``url``, on the same file system)."""
        return SnapshotReader.open(url or self.url, self.storage_options, trust_pickle=self.trust_pickle)


def snapshot_location_of(options: dict[str, str], source: str, more: tuple[str, ...] = ()) -> SnapshotLocation:
    """The snapshot a data source's options name (``path``, or ``checkpoint-dir`` + ``job`` [+
    ``checkpoint-id``]), with ``storage-options`` (JSON) for fsspec; ``more`` are the source's
    other options."""
    known = {"path", "checkpoint-dir", "job", "checkpoint-id", "storage-options", "trust-pickle", *more}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigurationError(f"format('{source}') has no option(s) {unknown}; it takes {sorted(known)}")
    checkpoint_id = options.get("checkpoint-id")
    if checkpoint_id is not None and not checkpoint_id.strip().isdigit():
        raise ConfigurationError(f"option checkpoint-id must be a checkpoint number, got {checkpoint_id!r}")
    url = snapshot_url(options.get("path"), options.get("checkpoint-dir"), options.get("job"),
                       int(checkpoint_id) if checkpoint_id is not None else None, "option job")
    try:
        storage_options = json.loads(options.get("storage-options") or "{}")
    except ValueError as exc:
        raise ConfigurationError(f"option storage-options must be a JSON object of fsspec options, e.g. "
                                 f"'{{\"anon\": false}}': {exc}") from None
    if not isinstance(storage_options, dict):
        raise ConfigurationError(f"option storage-options must be a JSON object, got {storage_options!r}")
    trust = (options.get("trust-pickle") or "false").strip().lower()
    if trust not in ("true", "false"):
        raise ConfigurationError(f"option trust-pickle must be true or false, got {options['trust-pickle']!r}")
    return SnapshotLocation(url, storage_options, trust == "true")


@dataclass(frozen=True)
class ReadOptions:
    """What to read, parsed from the data source's options."""

    location: SnapshotLocation
    operator_id: str | None
    states: tuple[str, ...] | None
    #: the change feed's first checkpoint (URL; ``location`` is the second), or None to read one snapshot
    changes_from: str | None = None

    @classmethod
    def parse(cls, options: dict[str, str]) -> "ReadOptions":
        given = dict(options)
        bounds = given.pop("changes-from", None), given.pop("changes-to", None)
        location = snapshot_location_of(given, NAME, ("operator", "state"))
        states = tuple(s.strip() for s in options["state"].split(",") if s.strip()) if options.get("state") else None
        if bounds == (None, None):
            return cls(location, options.get("operator"), states)
        if given.get("checkpoint-id") is not None or not all(b is not None and b.strip().isdigit() for b in bounds):
            raise ConfigurationError(f"a change feed takes two checkpoint numbers of one job, changes-from and "
                                     f"changes-to, and the job's directory (path, or checkpoint-dir and job) without "
                                     f"checkpoint-id; got changes-from={bounds[0]!r}, changes-to={bounds[1]!r}")
        start, end = (int(b) for b in bounds if b is not None)
        if start >= end:
            raise ConfigurationError(f"changes-from={start} must be an earlier checkpoint than changes-to={end}: the "
                                     f"feed holds what changed from the first to the second")
        first, last = (posixpath.join(location.url.rstrip("/"), f"chk-{n}") for n in (start, end))
        return cls(SnapshotLocation(last, location.storage_options, location.trust_pickle), options.get("operator"),
                   states, first)


class StateLayout:
    """The schema of a read and how a cell becomes a row of it."""

    def __init__(self, key_columns: tuple[KeyColumn, ...] | None, states: Sequence[StateMetaInfo],
                 change_feed: bool = False) -> None:
        self.key_columns = key_columns
        self.change_feed = change_feed
        single = states[0] if len(states) == 1 else None
        self.user_key_type: DataType | None = None
        self.value_type: DataType | None = None
        if single is not None and single.kind == StateKind.TIMERS.value:
            self.user_key_type = LongType()
        elif single is not None:
            if "user_key" in single.serializers:
                self.user_key_type = _spark_type(single.serializers["user_key"])
            self.value_type = _spark_type(single.serializers["value"])

    def key_names(self) -> list[str]:
        if self.key_columns is None:
            return ["key"]
        return [c.name if c.name not in CELL_COLUMNS else f"key_{c.name}" for c in self.key_columns]

    def schema(self) -> str:
        """The schema as DDL (the data source's planner has no session to parse types with)."""
        keys = [("key", "string")] if self.key_columns is None else \
            [(name, c.type) for name, c in zip(self.key_names(), self.key_columns)]
        typed = {"user_key": self.user_key_type, "value": self.value_type}
        cells = [(name, ddl_type(typed.get(name) or StringType()) if name in typed else _CELL_TYPES[name])
                 for name in CELL_COLUMNS]
        feed = [("change", "string")] if self.change_feed else []
        return ", ".join(f"`{name.replace('`', '``')}` {type_name}" for name, type_name in keys + cells + feed)

    def row(self, cell: StateCell, *change: str) -> tuple[Any, ...]:
        """The row of ``cell`` (in a change feed, followed by its change)."""
        if self.key_columns is None:
            keys: tuple[Any, ...] = (readable(cell.key),)
        elif len(self.key_columns) == 1:
            keys = (cell.key,)
        else:
            keys = tuple(cell.key)
        user_key = cell.user_key if self.user_key_type is not None else readable(cell.user_key)
        value = cell.value if self.value_type is not None else readable(cell.value)
        return (*keys, cell.key_group, cell.state, cell.kind, readable(cell.namespace), user_key, value,
                cell.value_bytes, cell.ttl_timestamp, cell.error, *change)


class _KeyGroups(InputPartition):
    """Subtask ``index`` of ``parallelism`` (``parallelism`` = max parallelism: one key group)."""

    def __init__(self, index: int, parallelism: int) -> None:
        super().__init__((index, parallelism))
        self.index, self.parallelism = index, parallelism


class StateReader(DataSourceReader):
    def __init__(self, options: ReadOptions, layout: StateLayout) -> None:
        self.options, self.layout = options, layout
        self.keys: list[Any] | None = None  # only these keys (a pushed-down key filter)
        self.states = options.states

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Narrow the read by key and by state; every filter is still evaluated by Spark too."""
        columns = self.layout.key_columns
        # only types whose filter values hash exactly as Spark hashed the rows (not a timestamp's
        # time zone, not a float rounded to a float column)
        names = self.layout.key_names() if columns and all(c.type in EXACT_KEY_TYPES for c in columns) else None
        fixed: dict[str, list[Any]] = {}
        for f in filters:
            attribute: tuple[str, ...] = getattr(f, "attribute", ())
            column = attribute[0] if len(attribute) == 1 else None
            values = [f.value] if isinstance(f, (EqualTo, EqualNullSafe)) else list(f.value) if isinstance(f, In) \
                else None
            if column is not None and values is not None:
                if names is not None and column in names:
                    fixed[column] = [v for v in fixed[column] if v in values] if column in fixed else values
                elif column == "state":
                    self.states = tuple(s for s in values if self.states is None or s in self.states)
            yield f
        if names is not None and all(n in fixed for n in names):
            if len(names) == 1:
                self.keys = list(fixed[names[0]])
            elif all(len(fixed[n]) == 1 for n in names):
                self.keys = [tuple(fixed[n][0] for n in names)]

    def partitions(self) -> Sequence[InputPartition]:
        reader = self.options.location.open()
        operator = reader.operator(self.options.operator_id)
        if self.keys is not None:
            key_groups = sorted({reader.key_group_of(operator, key) for key in self.keys})
            return [_KeyGroups(kg, operator.max_parallelism) for kg in key_groups] or [_KeyGroups(0, operator.max_parallelism)]
        return [_KeyGroups(i, operator.parallelism) for i in range(operator.parallelism)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _KeyGroups)
        reader = self.options.location.open()
        operator = reader.operator(self.options.operator_id)
        # a key filter only chose the key groups: Spark applies it to their rows
        if self.options.changes_from is None:
            for cell in reader.cells(operator, partition.index, partition.parallelism, self.states):
                yield self.layout.row(cell)
            return
        before = self.options.location.open(self.options.changes_from)
        for change in changes(before, reader, before.operator(self.options.operator_id), operator, partition.index,
                              partition.parallelism, self.states):
            yield self.layout.row(change.cell, change.change)


class StatekitStateSource(DataSource):
    """``format("statekit")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.read_options = ReadOptions.parse(dict(options))
        reader = self.read_options.location.open()
        operator = reader.operator(self.read_options.operator_id)
        states = reader.states(operator)
        wanted = self.read_options.states
        if wanted is not None:
            missing = [s for s in wanted if s not in states]
            if missing:
                raise ConfigurationError(f"{reader.url} holds no state(s) {missing} in operator "
                                         f"{operator.operator_id!r}; it holds {sorted(states)}")
        chosen = [states[s] for s in wanted] if wanted is not None else list(states.values())
        self.layout = StateLayout(reader.key_columns(operator), chosen, self.read_options.changes_from is not None)
        if self.read_options.changes_from is not None:
            before = self.read_options.location.open(self.read_options.changes_from)
            check_same_job(before.operator(self.read_options.operator_id), operator)

    def schema(self) -> str:
        return self.layout.schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return StateReader(self.read_options, self.layout)
