"""Keyed stateful processing of a bounded DataFrame: one epoch, one checkpoint.

::

    from statekit.spark import process_keyed
    alerts = process_keyed(readings, keys="sensor", function=SensorAlerts(),
                           schema="sensor string, alert string")

Backend, storage, parallelism and restore point come from ``spark.statekit.*`` conf. The key
group and subtask of every row are computed in Spark SQL (``pmod(xxhash64(keys), maxP)``); each
subtask's rows reach Python as Arrow batches through ``groupBy(subtask).applyInArrow``. The call
runs the job eagerly, commits the epoch's checkpoint once every subtask acknowledged, and returns
the output as a (locally checkpointed) DataFrame. Epoch N restores from the latest completed
checkpoint with an id below N.
"""
from __future__ import annotations

import json
from typing import Any, Iterator, Sequence, Tuple

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState, metadata_source
from statekit.checkpoint.store import CheckpointStore, CompletedCheckpoint
from statekit.runtime.function import KeyedBatchFunction, KeyedProcessFunction, ProcessFunction
from statekit.spark.checkpoints import driver_access
from statekit.spark.conf import StatekitConf
from statekit.spark.partitioning import partition_tokens
from statekit.spark.task import KEY_GROUP_COLUMN, MARKER_COLUMN, PARTITION_COLUMN, SubtaskSpec, run_subtask
from statekit.spi.errors import ConfigurationError, SnapshotError
from statekit.spi.key_groups import check_parallelism, default_max_parallelism

#: session settings for the epoch's query: p subtasks must run in parallel, not coalesced
_QUERY_SETTINGS = {"spark.sql.adaptive.coalescePartitions.enabled": "false"}


class _AcknowledgementParam(AccumulatorParam):
    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, a: list, b: list) -> list:
        a.extend(b)
        return a


def process_keyed(df: DataFrame, keys: str | Sequence[str], function: ProcessFunction,
                  schema: str | StructType, *, operator_id: str = "keyed-process", job_id: str | None = None,
                  conf: StatekitConf | None = None) -> DataFrame:
    """Process a bounded DataFrame as the job's next epoch; returns the output."""
    job = KeyedJob.create(df.sparkSession, df.columns, keys, function, schema, operator_id, job_id, conf)
    return job.run_epoch(df)


class KeyedJob:
    """What stays the same across a job's epochs: function, keys, output schema, conf."""

    def __init__(self, spark: Any, key_columns: tuple[str, ...], function: ProcessFunction,
                 output: StructType, operator_id: str, job_id: str, conf: StatekitConf) -> None:
        self.spark, self.key_columns, self.function, self.output = spark, key_columns, function, output
        self.operator_id, self.job_id, self.conf = operator_id, job_id, conf

    @classmethod
    def create(cls, spark: Any, columns: Sequence[str], keys: str | Sequence[str], function: ProcessFunction,
               schema: str | StructType, operator_id: str, job_id: str | None,
               conf: StatekitConf | None) -> "KeyedJob":
        conf = conf or StatekitConf.from_spark(spark.conf)
        key_columns = (keys,) if isinstance(keys, str) else tuple(keys)
        if not isinstance(function, (KeyedProcessFunction, KeyedBatchFunction)):
            raise ConfigurationError(f"the function must be a KeyedProcessFunction or a KeyedBatchFunction, "
                                     f"not {type(function).__name__}")
        missing = [c for c in key_columns if c not in columns]
        if not key_columns or missing:
            raise ConfigurationError(f"key columns {missing or list(key_columns)} are not columns of the "
                                     f"DataFrame ({list(columns)})")
        job_id = job_id or spark.conf.get("spark.statekit.job-id", None) or spark.sparkContext.appName
        output = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
        return cls(spark, key_columns, function, output, operator_id, job_id, conf)

    def run_epoch(self, df: DataFrame, epoch: int | None = None) -> DataFrame:
        """Run one epoch (default: after the latest checkpoint) and commit its checkpoint.
        Epoch N restores from the latest completed checkpoint with an id below N, so a replayed
        epoch recomputes the same state."""
        return _run_epoch(self, df, epoch)


def _run_epoch(job: KeyedJob, df: DataFrame, requested_epoch: int | None) -> DataFrame:
    spark, conf, key_columns, function = job.spark, job.conf, job.key_columns, job.function
    job_id, operator_id, output = job.job_id, job.operator_id, job.output
    storage = conf.create_storage()
    access = driver_access(storage, job_id)
    restore_url, restored = None, None
    store = CheckpointStore(access, conf.num_retained)
    if store.latest() is None and conf.restore_path:
        from statekit.storage.filesystem import resolve
        resolved = resolve(conf.restore_path)
        restored = CompletedCheckpoint(resolved.pointer, CheckpointMetadata.from_bytes(resolved.metadata, metadata_source(resolved.pointer)))
        restore_url = conf.restore_path
        store = CheckpointStore(access, conf.num_retained, restored, conf.restore_mode)
    if requested_epoch is None:
        restore_point = store.latest() or restored
        epoch = (restore_point.checkpoint_id if restore_point else 0) + 1
    else:
        epoch = requested_epoch
        own = store.latest_before(epoch)
        restore_point = own or (restored if restored and restored.checkpoint_id < epoch else None)
    previous = restore_point.metadata.operators.get(operator_id) if restore_point else None
    parallelism = conf.parallelism or (previous.parallelism if previous else spark.sparkContext.defaultParallelism)
    max_parallelism = conf.max_parallelism or (previous.max_parallelism if previous else
                                               default_max_parallelism(parallelism))
    check_parallelism(parallelism, max_parallelism)
    if previous is not None and previous.max_parallelism != max_parallelism:
        raise ConfigurationError(
            f"operator {operator_id!r} was checkpointed with max parallelism {previous.max_parallelism}; the "
            f"number of key groups is fixed for the life of a job: set spark.statekit.max-parallelism="
            f"{previous.max_parallelism}")

    acknowledgements = spark.sparkContext.accumulator([], _AcknowledgementParam())
    spec = SubtaskSpec(function, conf.create_backend(), storage, job_id, operator_id, epoch, parallelism,
                       max_parallelism, key_columns, to_arrow_schema(output), conf.incremental,
                       restore_point.metadata.to_bytes() if restore_point else None, restore_url, conf.local_dir,
                       conf.batch_max_bytes)

    subtask_of_token = {token: index for index, token in enumerate(partition_tokens(parallelism))}

    def subtask(key: Tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return run_subtask(spec, subtask_of_token[key[0].as_py()], batches, acknowledgements)

    planned = _plan(df, key_columns, parallelism, max_parallelism)
    previous_settings = {k: spark.conf.get(k, None) for k in _QUERY_SETTINGS}
    for k, v in _QUERY_SETTINGS.items():
        spark.conf.set(k, v)
    try:
        result = planned.groupBy(PARTITION_COLUMN).applyInArrow(subtask, output).localCheckpoint(eager=True)
    except BaseException:
        store.abort(epoch, [state for state, _ in _subtask_states(acknowledgements.value, parallelism).values()])
        raise
    finally:
        for k, v in previous_settings.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)
    states = _subtask_states(acknowledgements.value, parallelism)
    if len(states) != parallelism:
        store.abort(epoch, [state for state, _ in states.values()])
        raise SnapshotError(f"checkpoint {epoch} of job {job_id!r}: only subtasks {sorted(states)} of "
                            f"{parallelism} acknowledged; the checkpoint was aborted")
    operator = OperatorState(operator_id, parallelism, max_parallelism,
                             tuple(states[i][0] for i in range(parallelism)))
    recovery = {str(i): states[i][1] for i in range(parallelism)}
    store.add(CheckpointMetadata(epoch, job_id, {operator_id: operator},
                                 properties={"backend": spec.state_backend.name, "incremental": conf.incremental,
                                             "recovery": recovery}))
    return result


def _plan(df: DataFrame, key_columns: tuple[str, ...], parallelism: int, max_parallelism: int) -> DataFrame:
    """Key group and subtask in Spark SQL, plus one marker row per subtask; rows are partitioned
    by the subtask's partition token, so each subtask gets a partition of its own."""
    tokens = F.array(*[F.lit(t) for t in partition_tokens(parallelism)])
    key_group = F.pmod(F.xxhash64(*key_columns), F.lit(max_parallelism)).cast("int")
    subtask = F.expr(f"{KEY_GROUP_COLUMN} * {parallelism} div {max_parallelism}")  # Flink's operator index
    rows = (df.withColumn(KEY_GROUP_COLUMN, key_group)
            .withColumn(PARTITION_COLUMN, F.element_at(tokens, (subtask + 1).cast("int")))
            .withColumn(MARKER_COLUMN, F.lit(False)))
    spark = df.sparkSession
    markers = spark.range(parallelism).select(
        *[F.lit(None).cast(df.schema[c].dataType).alias(c) for c in df.columns],
        F.lit(-1).alias(KEY_GROUP_COLUMN), F.element_at(tokens, (F.col("id") + 1).cast("int")).alias(PARTITION_COLUMN),
        F.lit(True).alias(MARKER_COLUMN))
    return rows.unionByName(markers).repartition(parallelism, PARTITION_COLUMN)


def _subtask_states(acknowledgements: list, parallelism: int) -> dict[int, tuple[SubtaskState, str]]:
    """One state (and how the subtask recovered) per subtask; a repeated acknowledgement
    (speculative or retried attempt) replaces the earlier one. Failed attempts' accumulator
    updates never arrive."""
    states: dict[int, tuple[SubtaskState, str]] = {}
    for index, payload, recovery in acknowledgements:
        if 0 <= index < parallelism:
            states[index] = SubtaskState.from_json(json.loads(payload)), recovery
    return states
