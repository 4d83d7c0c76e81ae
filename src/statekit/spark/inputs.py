"""Two inputs under Spark as one DataFrame, so that a job of two inputs runs the one stage of a
keyed job (``spark.keyed``) and both inputs of an epoch land in its one checkpoint; in a streaming
query the two sources are one query, so a micro-batch, and its replay, hold the same rows of both.

Each row is tagged with its input (``INPUT_COLUMN``: 0 or 1) and carries its values in a struct
column of its input's own schema (``INPUT_STRUCTS``; null on the other input's rows), so that each
input keeps its columns and types. A connected job's key columns are on top as well, named as the
first input's and of the type both inputs' have (``int`` for integers that hash alike, such as a
``smallint`` and an ``int``): each key is hashed to its key group once, in the stage, as for one
input. A broadcast job's broadcast rows are collected on the driver each
epoch and processed by every subtask before its keyed rows (``KeyedTask.process_broadcast``); its
stage gets the keyed rows alone.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import IntegerType, StructType

from statekit.runtime.inputs import INPUT_NAMES, per_input
from statekit.spark.event_time import EventTimeColumn
from statekit.spark.key_columns import check_column_names, key_columns_of, key_hash_types
from statekit.spi.errors import ConfigurationError

#: each row's input, 0 or 1
INPUT_COLUMN = "__statekit_input"
#: the struct columns of the two inputs' values (a broadcast job: the keyed input, then the broadcast one)
INPUT_STRUCTS = ("__statekit_left", "__statekit_right")


@dataclass(frozen=True)
class TwoInputs:
    """A job of two inputs: connected keyed inputs (``KeyedCoProcessFunction``), or a keyed and a
    broadcast input (``KeyedBroadcastProcessFunction``); each input's schema; and the order of an
    epoch's broadcast rows (columns to sort them by; none: as collected)."""

    connected: bool
    schemas: tuple[StructType, StructType]
    broadcast_order: tuple[str, ...] = ()

    def event_time(self, event_time: Any, watermark_delay: Any, late_rows: Any) -> EventTimeColumn | None:
        """The job's event time: of each connected input (a value for both, or a dict of one per
        input), or of the keyed input of a broadcast job (broadcast rows have none)."""
        if not self.connected:
            return EventTimeColumn.of(self.schemas[0], event_time, watermark_delay, late_rows)
        return EventTimeColumn.of_inputs(self.schemas, per_input("event_time", event_time, INPUT_NAMES),
                                         per_input("watermark_delay", watermark_delay, INPUT_NAMES), late_rows,
                                         INPUT_COLUMN, INPUT_STRUCTS)

    def keyed_rows(self, tagged: DataFrame) -> DataFrame:
        """A broadcast job's keyed rows, with their own columns."""
        return tagged.where(F.col(INPUT_COLUMN) == 0).select(f"{INPUT_STRUCTS[0]}.*")

    def broadcast_rows(self, tagged: DataFrame, max_bytes: int) -> bytes | None:
        """A broadcast job's broadcast rows of the epoch, in order, as an Arrow IPC stream (None: there are none)."""
        rows = tagged.where(F.col(INPUT_COLUMN) == 1).select(f"{INPUT_STRUCTS[1]}.*")
        if self.broadcast_order:
            rows = rows.orderBy(*self.broadcast_order)
        table = rows.toArrow()
        if table.num_rows == 0:
            return None
        if table.nbytes > max_bytes:
            raise ConfigurationError(f"the epoch's broadcast rows are {table.nbytes} bytes ({table.num_rows} rows), "
                                     f"more than spark.statekit.broadcast.max-bytes={max_bytes}: every subtask gets "
                                     f"all of them; raise the setting, or send fewer or smaller rows per epoch")
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue()


def read_broadcast_rows(data: bytes) -> list[dict[str, Any]]:
    """The rows ``TwoInputs.broadcast_rows`` wrote, as dicts (as keyed rows reach a function)."""
    return pa.ipc.open_stream(data).read_all().to_pylist()


def connected(left: DataFrame, right: DataFrame, keys: Any) -> tuple[DataFrame, tuple[str, ...], TwoInputs]:
    """The two inputs of a connected job tagged into one DataFrame, and its key columns (the first
    input's names). ``keys``: the key columns of both (a name or a list), or a dict of one per input."""
    _check_names(left, right)
    left_keys, right_keys = (key_columns_of(df.schema, k)
                             for df, k in zip((left, right), per_input("keys", keys, INPUT_NAMES)))
    left_types = [left.schema[c].dataType for c in left_keys]
    right_types = [right.schema[c].dataType for c in right_keys]
    if key_hash_types([t.simpleString() for t in left_types]) != key_hash_types(
            [t.simpleString() for t in right_types]):
        raise ConfigurationError(
            f"the key columns of the two inputs have other types: left {list(left_keys)} "
            f"{[t.simpleString() for t in left_types]}, right {list(right_keys)} "
            f"{[t.simpleString() for t in right_types]}; keys of other types hash to other key groups and would never "
            f"meet: cast one side's key columns to the other's types (e.g. F.col(name).cast('bigint'))")
    # keys of integer types that hash alike (tinyint, smallint, int) as int on both sides: no narrowing cast
    common = [left_type if left_type == right_type else IntegerType()
              for left_type, right_type in zip(left_types, right_types)]
    struct_types = (left.schema, right.schema)
    tagged = [_tagged(df, index, struct_types, [F.col(k).cast(t).alias(name)
                                                for k, t, name in zip(own_keys, common, left_keys)])
              for index, (df, own_keys) in enumerate(((left, left_keys), (right, right_keys)))]
    return tagged[0].unionByName(tagged[1]), left_keys, TwoInputs(True, struct_types)


def with_broadcast(df: DataFrame, broadcast: DataFrame,
                   broadcast_order: str | Sequence[str] | None) -> tuple[DataFrame, TwoInputs]:
    """A keyed input and a broadcast input tagged into one DataFrame."""
    _check_names(df, broadcast)
    order = (broadcast_order,) if isinstance(broadcast_order, str) else tuple(broadcast_order or ())
    missing = [c for c in order if c not in broadcast.columns]
    if missing:
        raise ConfigurationError(f"broadcast_order columns {missing} are not columns of the broadcast DataFrame "
                                 f"({broadcast.columns})")
    struct_types = (df.schema, broadcast.schema)
    tagged = [_tagged(side, index, struct_types) for index, side in enumerate((df, broadcast))]
    return tagged[0].unionByName(tagged[1]), TwoInputs(False, struct_types, order)


def _tagged(df: DataFrame, index: int, struct_types: tuple[StructType, StructType],
            keys: Sequence[Any] = ()) -> DataFrame:
    """The rows of input ``index``: the ``keys`` on top, the input, its values in its struct column."""
    structs = [F.struct(*[F.col(name) for name in df.columns]).alias(INPUT_STRUCTS[i]) if i == index
               else F.lit(None).cast(struct_types[i]).alias(INPUT_STRUCTS[i]) for i in range(2)]
    return df.select(*keys, F.lit(index).cast("tinyint").alias(INPUT_COLUMN), *structs)


def _check_names(*inputs: DataFrame) -> None:
    for name, df in zip(INPUT_NAMES, inputs):
        check_column_names(df.columns, f"the {name} input")
