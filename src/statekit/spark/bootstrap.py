"""Bootstrapping state: a savepoint written from a DataFrame, as Flink's State Processor API
bootstraps one and as Spark's ``transformWithState`` takes an initial state.

::

    from statekit import MapStateDescriptor, ValueStateDescriptor
    from statekit.serializers import Int64Serializer
    from statekit.spark import write_savepoint

    url = write_savepoint(totals, keys="user", job_id="clicks", parallelism=8,
                          states={"clicks": ValueStateDescriptor("count", Int64Serializer()),
                                  "pages": MapStateDescriptor("pages")})
    spark.conf.set("spark.statekit.restore.path", url)   # the job starts from it

Each column named in ``states`` goes into its state, for the row's key: a value state takes the
column's value (give one row per key: rows of a key arrive in no set order), a list state its elements (an array column adds all
of them), a map state its entries (a map column), and a reducing or aggregating state ``add``s
it; null columns are skipped. For anything else, pass ``function=``: a ``KeyedProcessFunction``
whose ``process`` writes the key's state (what it returns is dropped).

The rows run through the same subtasks a job runs, in parallel, one Spark task per subtask; each
writes its key groups straight into the savepoint directory in the canonical format, and the
driver commits the savepoint's metadata once every subtask has written. Any backend restores it,
at any parallelism.
"""
from __future__ import annotations

import posixpath
from typing import Any, Iterable, Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState
from statekit.checkpoint.signing import signing
from statekit.reading.snapshot_reader import KEY_SCHEMA
from statekit.runtime.function import KeyedContext, KeyedProcessFunction, ProcessFunction, check_function
from statekit.runtime.task import job_key_serializer
from statekit.spark.conf import PREFIX, StatekitConf
from statekit.spark.key_columns import check_column_names, key_columns_of
from statekit.spark.keyed import SubtaskRun
from statekit.spark.session import default_parallelism
from statekit.spark.task import SubtaskSpec
from statekit.spi.backend import StateBackend
from statekit.spi.descriptors import StateDescriptor, StateKind
from statekit.spi.errors import ConfigurationError, SnapshotError
from statekit.spi.key_groups import check_parallelism, default_max_parallelism
from statekit.spi.names import check_job_id, check_operator_id
from statekit.spi.storage import CheckpointStorage, SavepointTarget
from statekit.storage.layout import SAVEPOINT_PREFIX
from statekit.storage.urls import open_url

#: the (empty) output of a bootstrap's subtasks
_NO_OUTPUT = StructType.fromJson({"type": "struct", "fields": [
    {"name": "unused", "type": "integer", "nullable": True, "metadata": {}}]})


class ColumnsToState(KeyedProcessFunction):
    """Writes columns of each row into states of the row's key (see the module documentation)."""

    def __init__(self, states: Mapping[str, StateDescriptor]) -> None:
        if not states:
            raise ConfigurationError("states= maps at least one column to a state descriptor, e.g. "
                                     "{'total': ValueStateDescriptor('total')}")
        for column, descriptor in states.items():
            if not isinstance(descriptor, StateDescriptor) or descriptor.kind is StateKind.TIMERS:
                raise ConfigurationError(f"states[{column!r}] must be a state descriptor (value, list, map, reducing "
                                         f"or aggregating), got {descriptor!r}")
        self.states = dict(states)

    def open(self, ctx: KeyedContext) -> None:
        self._targets = [(column, d.kind, ctx.get_state(d)) for column, d in self.states.items()]

    def process(self, row: Any, ctx: KeyedContext) -> Iterable[Any] | None:
        for column, kind, state in self._targets:
            value = row[column]
            if value is None:
                continue
            if kind is StateKind.VALUE:
                state.update(value)
            elif kind is StateKind.LIST:
                state.add_all(value) if isinstance(value, (list, tuple)) else state.add(value)
            elif kind is StateKind.MAP:
                state.put_all(dict(value))  # Arrow gives a map column as a list of (key, value) pairs
            else:
                state.add(value)
        return None


def write_savepoint(df: DataFrame, keys: str | Sequence[str], states: Mapping[str, StateDescriptor] | None = None,
                    *, function: ProcessFunction | None = None, job_id: str, savepoint_dir: str | None = None,
                    parallelism: int | None = None, max_parallelism: int | None = None,
                    operator_id: str = "keyed-process", conf: StatekitConf | None = None) -> str:
    """Write a savepoint of ``df``'s state (``states``: column -> state descriptor, or
    ``function``) to ``savepoint_dir`` (default ``spark.statekit.savepoint.dir``); returns its URL,
    ``<savepoint_dir>/savepoint-<job_id>-bootstrap``. ``parallelism`` defaults to Spark's default
    parallelism; ``max_parallelism`` (the job's number of key groups, fixed for its life) to
    the default for the parallelism."""
    spark = df.sparkSession
    conf = conf or StatekitConf.from_spark(spark.conf)
    if (states is None) == (function is None):
        raise ConfigurationError("write_savepoint takes either states= (column -> state descriptor) or function= "
                                 "(a KeyedProcessFunction writing the state)")
    bootstrap = function if function is not None else ColumnsToState(states or {})
    check_function(bootstrap)
    check_job_id(job_id)
    check_operator_id(operator_id)
    key_columns = key_columns_of(df.schema, keys)
    check_column_names(df.columns, "the DataFrame")
    missing = [c for c in states or {} if c not in df.columns]
    if missing:
        raise ConfigurationError(f"columns {missing} are not columns of the DataFrame ({df.columns})")
    directory = savepoint_dir or conf.savepoint_dir
    if not directory:
        raise ConfigurationError(f"write_savepoint needs savepoint_dir= or {PREFIX}savepoint.dir (a directory URL)")
    parallelism = parallelism or conf.parallelism or default_parallelism(spark)
    max_parallelism = max_parallelism or conf.max_parallelism or default_max_parallelism(parallelism)
    check_parallelism(parallelism, max_parallelism)
    savepoint_id = f"{job_id}-bootstrap"
    fs, root = open_url(directory, f"{PREFIX}savepoint.dir")
    target_dir = posixpath.join(root, f"{SAVEPOINT_PREFIX}{savepoint_id}")
    if fs.exists(target_dir):
        raise ConfigurationError(f"savepoint {fs.unstrip_protocol(target_dir)} exists; delete it or choose another "
                                 f"job id or savepoint directory")
    storage = conf.create_storage()
    backend = conf.create_backend()
    location = storage.savepoint_location(directory, savepoint_id)
    with signing(conf.signing_secret) as signed:
        return _bootstrap(df, bootstrap, conf, backend, storage, location, job_id, operator_id, key_columns,
                          parallelism, max_parallelism, signed)


def _bootstrap(df: DataFrame, bootstrap: ProcessFunction, conf: StatekitConf, backend: StateBackend,
               storage: CheckpointStorage, location: SavepointTarget, job_id: str, operator_id: str,
               key_columns: tuple[str, ...], parallelism: int, max_parallelism: int, signed: bool) -> str:
    """Run the bootstrap's subtasks and commit the savepoint they wrote; discard it on any failure."""
    try:
        key_types = [df.schema[c].dataType.simpleString() for c in key_columns]
        spec = SubtaskSpec(bootstrap, backend, storage, job_id, operator_id, 0, parallelism, max_parallelism,
                           key_columns, to_arrow_schema(_NO_OUTPUT), False, None, None, conf.local_dir,
                           savepoint=location, local_retention_seconds=conf.local_retention_seconds,
                           key_serializer=job_key_serializer(None, key_types), signed=signed)
        run = SubtaskRun(spec)
        run.run(df, _NO_OUTPUT, keep_output=False)
        written = run.states()
        if len(written) != parallelism:
            raise SnapshotError(f"bootstrap of job {job_id!r}: only subtasks {sorted(written)} of {parallelism} "
                                f"wrote their state")
        operator = OperatorState(operator_id, parallelism, max_parallelism,
                                 tuple(written[i][0] for i in range(parallelism)))
        properties = {"backend": backend.name, "incremental": False, "bootstrap": True,
                      KEY_SCHEMA: {operator_id: [list(c) for c in zip(key_columns, key_types)]}}
        metadata = CheckpointMetadata(0, job_id, {operator_id: operator}, is_savepoint=True, properties=properties)
        return location.commit(metadata.checkpoint_id, metadata.to_bytes()).external_pointer
    except BaseException:
        location.discard()  # nothing half-written stays
        raise
