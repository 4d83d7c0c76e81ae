"""Keyed stateful processing of a bounded DataFrame: one epoch, one checkpoint.

::

    from statekit.spark import process_keyed
    alerts = process_keyed(readings, keys="sensor", function=SensorAlerts(),
                           schema="sensor string, alert string")

Backend, storage, parallelism and restore point come from ``spark.statekit.*`` conf. The key
group and subtask of every row are computed in Spark SQL (``pmod(xxhash64(keys), maxP)``); each
subtask's rows reach Python as Arrow batches of its own partition (``repartitionById`` and
``mapInArrow``: no sort before Python). The call
runs the job eagerly, commits the epoch's checkpoint once every subtask acknowledged, and returns
the output as a (locally checkpointed) DataFrame. Epoch N restores from the latest completed
checkpoint with an id below N (``spark.restore_point``). Each call is one run of the job: it takes
the job's ownership before its epoch and checks it before committing (``checkpoint.ownership``).
"""
from __future__ import annotations

import contextlib
import decimal
import importlib
import json
import re
import time
from typing import Any, Dict, Iterator, Mapping, NamedTuple, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame, SparkSession, functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StringType, StructField, StructType

from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.ownership import BOUNDED, JobOwnership, RunIdentity, recorded_identity
from statekit.checkpoint.signing import signing
from statekit.checkpoint.store import FRESH_START, RESTORE_POINT, CheckpointStore
from statekit.checkpoint.snapshot_format import format_property
from statekit.reading.snapshot_reader import KEY_SCHEMA, recorded_key_columns
from statekit.runtime.event_time import LateRows
from statekit.runtime.function import (
    ONE_INPUT_KINDS, KeyedBroadcastProcessFunction, KeyedCoProcessFunction, ProcessFunction, check_function,
)
from statekit.runtime.local_recovery import job_scope
from statekit.runtime.metrics import (
    METRICS_PROPERTY, EpochMetrics, MetricsListener, TaskMetrics, check_listener, elapsed_ms, publish,
)
from statekit.runtime.sink_coordinator import SINK_PROPERTY, RetryPolicy, SinkCoordinator
from statekit.runtime.sink_writer import check_sink
from statekit.runtime.task import PROCESSING_TIME, job_key_serializer, restore_trusted
from statekit.spark.checkpoints import driver_access
from statekit.spark.conf import PREFIX, StatekitConf
from statekit.spark.data_sources import register_data_sources
from statekit.spark.event_time import EventTimeColumn, recorded_event_time, subtask_event_time
from statekit.spark.inputs import INPUT_STRUCTS, TwoInputs
from statekit.spark.key_columns import check_column_names, key_columns_of, key_hash_types
from statekit.spark.pre_aggregation import PreAggregation
from statekit.spark.restore_point import RESTORED_FROM, StreamProgress, choose_restore_point, epoch_processing_time
from statekit.spark.materialized import materialized
from statekit.spark.session import application_name, default_parallelism
from statekit.spark.task import KEY_GROUP_COLUMN, SubtaskSpec, rows_mask, run_subtask
from statekit.spi.errors import ConfigurationError, SnapshotError, StatekitError
from statekit.spi.key_groups import KeyGroupRange, check_parallelism, default_max_parallelism
from statekit.spi.names import check_job_id, check_operator_id
from statekit.spi.serializer import trusting
from statekit.spi.sinks import Sink
from statekit.spi.storage import CheckpointStorage, CheckpointStorageAccess


#: rows per Arrow batch Spark hands a subtask (Spark's default, 10,000, makes the per-batch costs
#: on both sides of the Python worker show; the batches stay far below the memory of a task)
ARROW_BATCH_ROWS_SETTING = "spark.sql.execution.arrow.maxRecordsPerBatch"
ARROW_BATCH_ROWS = 200_000
#: a subtask's snapshot, how it recovered, its (largest event time of each input, late rows), its sink
#: record, its metrics (None: off, or an acknowledgement without them)
SubtaskAcknowledgement = Tuple[SubtaskState, str, Tuple[Sequence[int], int], Optional[Dict[str, Any]],
                               Optional[TaskMetrics]]


class KeyedOutput(NamedTuple):
    """An epoch's output and its side output of late rows (``late_rows="side_output"``): the rows
    that came too late, with the input's columns and types."""

    output: DataFrame | None  # None where a transactional sink took the output
    late: DataFrame


def process_keyed(df: DataFrame, keys: str | Sequence[str], function: ProcessFunction,
                  schema: str | StructType, *, operator_id: str = "keyed-process", job_id: str | None = None,
                  conf: StatekitConf | None = None, processing_time_ms: int | None = None,
                  event_time: str | None = None, watermark_delay: Any = None, late_rows: str = "drop",
                  pre_aggregate: Mapping[str, Column] | None = None,
                  end_of_input: bool = False, listener: MetricsListener | None = None) -> DataFrame | KeyedOutput:
    """Process a bounded DataFrame as the job's next epoch; returns the output.
    ``processing_time_ms``: the epoch's processing time (what state TTL and processing-time timers
    measure against); default now, or what an earlier run of the same epoch recorded.
    ``event_time`` (a timestamp or epoch-millisecond column) with ``watermark_delay`` (e.g.
    ``"10 minutes"``): the epoch's watermark is derived from the earlier epochs' event times
    (``runtime.event_time``), event-time timers up to it fire at the end of the epoch, and late
    rows are dropped and counted; ``late_rows="process"`` keeps them, and ``"side_output"``
    returns them: the call then returns a ``KeyedOutput`` (output, late rows). Event-time windows
    judge lateness themselves: a row is late when all its windows are past their lateness.
    ``pre_aggregate`` (output column -> aggregate, e.g. ``{"count": F.count("*")}``): the rows are
    combined per key in Spark SQL first, and the function gets one row per key with the key columns
    and these aggregates (``spark.pre_aggregation``).
    ``end_of_input``: the DataFrame is the last of the job's input, as at the end of a bounded input
    in Flink: after its rows the watermark moves to the largest timestamp, so every event-time
    timer fires (every window closes, every session ends) in this epoch, and later epochs find
    every row late.
    ``listener``: called with the epoch's ``runtime.metrics.EpochMetrics`` once its checkpoint is
    committed (``runtime.metrics.add_listener`` registers one for every job)."""
    job = KeyedJob.create(df.sparkSession, df.schema, keys, function, schema, operator_id, job_id, conf,
                          event_time, watermark_delay, late_rows, pre_aggregate=pre_aggregate)
    job.add_listener(listener)
    output = job.run_epoch(df, processing_time_ms=processing_time_ms, end_of_input=end_of_input)
    assert output is not None  # a job without a sink returns its output
    return output


class KeyedJob:
    """What stays the same across a run's epochs: function, keys, output schema, conf, the
    storage access and the run's ownership of the job."""

    def __init__(self, spark: SparkSession, key_columns: tuple[str, ...], function: ProcessFunction,
                 output: StructType, operator_id: str, job_id: str, conf: StatekitConf,
                 event_time: EventTimeColumn | None = None, key_types: tuple[str, ...] = (),
                 sink: Sink | None = None, pre_aggregation: PreAggregation | None = None,
                 inputs: TwoInputs | None = None) -> None:
        self.spark, self.key_columns, self.function, self.output = spark, key_columns, function, output
        #: the key columns' Spark SQL types, recorded in each checkpoint for readers of the state
        self.key_types = key_types
        self.operator_id, self.job_id, self.conf = operator_id, job_id, conf
        self.event_time = event_time
        self.pre_aggregation = pre_aggregation
        #: a job of two inputs: how they are tagged into one DataFrame (``spark.inputs``)
        self.inputs = inputs
        self.storage: CheckpointStorage = conf.create_storage()
        self.access: CheckpointStorageAccess = driver_access(self.storage, job_id)
        self._ownership: JobOwnership | None = None
        #: a transactional sink's coordinator: the job's output goes there instead of into a DataFrame
        self.sink = (SinkCoordinator(check_sink(sink), job_id, operator_id, RetryPolicy(conf.sink_commit_attempts),
                                     conf.sink_ignore_lost) if sink is not None else None)
        #: called with each committed epoch's metrics; the last epoch's (None: not computed, or metrics off)
        self.listeners: list[MetricsListener] = []
        self.last_metrics: EpochMetrics | None = None

    def add_listener(self, listener: MetricsListener | None) -> None:
        """Call ``listener`` with each epoch's metrics once its checkpoint is committed (None: none)."""
        if listener is not None:
            self.listeners.append(check_listener(listener))

    def ownership(self, identity: RunIdentity) -> JobOwnership:
        """This run's ownership of the job (created on its first epoch)."""
        if self._ownership is None:
            self._ownership = JobOwnership(self.access, self.job_id, identity, self.conf.take_over)
        return self._ownership

    def store(self, streaming: bool = False) -> CheckpointStore:
        """The job's completed checkpoints. A streaming job keeps at least two: until Spark commits
        micro-batch ``b``, a replay of it restores the checkpoint before the newest."""
        retained = max(self.conf.num_retained, 2) if streaming else self.conf.num_retained
        return CheckpointStore(self.access, retained, ownership=self._ownership)

    @classmethod
    def create(cls, spark: SparkSession, input_schema: StructType, keys: str | Sequence[str],
               function: ProcessFunction, schema: str | StructType, operator_id: str, job_id: str | None,
               conf: StatekitConf | None, event_time: str | None = None, watermark_delay: Any = None,
               late_rows: str = "drop", sink: Sink | None = None,
               pre_aggregate: Mapping[str, Column] | None = None, inputs: TwoInputs | None = None) -> "KeyedJob":
        """``inputs``: a job of two inputs (``spark.inputs``), whose ``input_schema`` is that of
        the keyed input of a broadcast job, or of the tagged DataFrame of a connected one."""
        conf = conf or StatekitConf.from_spark(spark.conf)
        register_data_sources(spark)  # its state can be read back in the same session
        check_function(function, ONE_INPUT_KINDS if inputs is None else (
            KeyedCoProcessFunction,) if inputs.connected else (KeyedBroadcastProcessFunction,))
        check_operator_id(operator_id)
        key_columns = key_columns_of(input_schema, keys)
        if inputs is not None and pre_aggregate is not None:
            raise ConfigurationError("pre_aggregate is for jobs of one input: a job of two inputs gets its rows as they "
                                     "are")
        if job_id is not None:
            check_job_id(job_id)
        elif conf.job_id is not None:
            job_id = conf.job_id
        else:
            job_id = check_job_id(application_name(spark), f"the application name (the default job id; set "
                                                             f"{PREFIX}job-id or pass job_id= to choose one)")
        output = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
        pre_aggregation = PreAggregation.of(pre_aggregate, key_columns, event_time)
        if pre_aggregation is None:  # else only the key columns and the aggregates reach mapInArrow
            check_column_names(input_schema.names, "the DataFrame")
        event_time_column = (EventTimeColumn.of(input_schema, event_time, watermark_delay, late_rows) if inputs is None
                             else inputs.event_time(event_time, watermark_delay, late_rows))
        return cls(spark, key_columns, function, output, operator_id, job_id, conf, event_time_column,
                   tuple(input_schema[c].dataType.simpleString() for c in key_columns), sink, pre_aggregation, inputs)

    @property
    def side_output(self) -> bool:
        """Whether the job returns its late rows (``late_rows="side_output"``)."""
        return self.event_time is not None and self.event_time.rule.late_rows is LateRows.SIDE_OUTPUT

    def run_epoch(self, df: DataFrame, epoch: int | None = None, progress: StreamProgress | None = None,
                  processing_time_ms: int | None = None,
                  end_of_input: bool = False) -> DataFrame | KeyedOutput | None:
        """Run one epoch (default: after the latest checkpoint) and commit its checkpoint.
        Epoch N restores from the latest completed checkpoint with an id below N, so a replayed
        epoch recomputes the same state; ``progress`` (streaming) is what Spark's own checkpoint
        says at this micro-batch; ``processing_time_ms`` sets the epoch's processing time.
        Returns the output, or None when the job has a sink: then the output is committed to it
        once the checkpoint is complete, and a replayed epoch whose checkpoint completed is not
        computed again (its output is committed again instead, ``runtime.sink_coordinator``).
        With a side output of late rows, returns a ``KeyedOutput`` (its output None with a sink).
        ``end_of_input``: every event-time timer fires after the epoch's rows (``process_keyed``)."""
        self.last_metrics = None
        with signing(self.conf.signing_secret) as signed:
            return _run_epoch(self, df, epoch, progress, processing_time_ms, signed, end_of_input)

    def epoch_metrics(self, epoch: int, states: Mapping[int, SubtaskAcknowledgement], started: float,
                      restored: Mapping[str, Any] | None) -> EpochMetrics | None:
        """The epoch's metrics from its subtasks' (None: off, or a subtask sent none), its history
        taken on from the ``restored`` checkpoint's properties."""
        subtasks = [states[i][4] for i in sorted(states)]
        if not self.conf.metrics_enabled or any(s is None for s in subtasks):
            return None
        policy = self.event_time.rule.late_rows.value if self.event_time is not None else None
        metrics = EpochMetrics.of(self.job_id, self.operator_id, epoch, subtasks, policy,  # type: ignore[arg-type]
                                  elapsed_ms(started))
        metrics.continue_history(restored)
        return metrics


def _run_epoch(job: KeyedJob, df: DataFrame, requested_epoch: int | None, progress: StreamProgress | None,
               processing_time_ms: int | None, signed: bool, end_of_input: bool) -> DataFrame | KeyedOutput | None:
    # the session of the epoch's rows: under Spark Connect, a streaming query's micro-batches are run
    # by a Python process of the server, in a session of its own
    started = time.perf_counter()
    spark, conf, key_columns, function = df.sparkSession, job.conf, job.key_columns, job.function
    job_id, operator_id, output, storage = job.job_id, job.operator_id, job.output, job.storage
    ownership = job.ownership(progress.identity if progress is not None else BOUNDED)
    store = job.store(streaming=progress is not None)
    chosen = choose_restore_point(store, conf, job_id, requested_epoch, progress, storage.durable)
    ownership.begin_epoch(store.latest())  # after the restore point passed its checks: a refused run takes nothing
    epoch, store, restore_url = chosen.epoch, chosen.store, chosen.external_url
    if job.sink is not None:
        latest = store.latest()
        job.sink.recover(latest.metadata if latest is not None else None, job.access.restore_streams())
        if _output_committed(job.sink, store, epoch, progress):
            return None
        if restore_url is not None and chosen.checkpoint is not None:
            job.sink.commit_restored(chosen.checkpoint.metadata, restore_url,
                                     storage.resolve_checkpoint(restore_url).streams)
    previous = chosen.checkpoint.metadata.operators.get(operator_id) if chosen.checkpoint else None
    parallelism = conf.parallelism or (previous.parallelism if previous else default_parallelism(spark))
    max_parallelism = conf.max_parallelism or (previous.max_parallelism if previous else
                                               default_max_parallelism(parallelism))
    if previous is not None and previous.max_parallelism != max_parallelism:
        raise ConfigurationError(
            f"operator {operator_id!r} was checkpointed with max parallelism {previous.max_parallelism}; the "
            f"number of key groups is fixed for the life of a job: set spark.statekit.max-parallelism="
            f"{previous.max_parallelism}")
    if parallelism > max_parallelism:
        source = f"{PREFIX}parallelism={parallelism}" if conf.parallelism else \
            f"Spark's default parallelism ({parallelism}, the default of {PREFIX}parallelism)"
        limit = f"the job's max parallelism {max_parallelism}, fixed since its first checkpoint" if previous else \
            f"{PREFIX}max-parallelism={max_parallelism}"
        raise ConfigurationError(f"{source} exceeds {limit}: every subtask needs at least one key group; set "
                                 f"{PREFIX}parallelism to at most {max_parallelism}"
                                 + ("" if previous else f", or raise {PREFIX}max-parallelism"))
    check_parallelism(parallelism, max_parallelism)
    if chosen.checkpoint is not None:
        check_key_types(chosen.checkpoint.metadata.properties, operator_id, key_columns, job.key_types,
                        chosen.external_url or f"checkpoint {chosen.checkpoint.checkpoint_id}")

    processing_time = processing_time_ms if processing_time_ms is not None else \
        epoch_processing_time(store, epoch, progress)
    restored_properties = chosen.checkpoint.metadata.properties if chosen.checkpoint else None
    backend = conf.create_backend()
    trusted = signed or restore_trusted(conf.trust_pickle, backend, conf.checkpoint_format)
    with trusting(trusted):  # an untrusted restore point of pickled keys is refused here, on the driver
        key_serializer = job_key_serializer(previous, job.key_types)
    if job.pre_aggregation is not None:
        df = job.pre_aggregation.apply(df)
    broadcast_rows = None
    if job.inputs is not None and not job.inputs.connected:  # every subtask gets the broadcast rows first
        broadcast_rows = job.inputs.broadcast_rows(df, conf.broadcast_max_bytes)
        df = job.inputs.keyed_rows(df)
    spec = SubtaskSpec(function, backend, storage, job_id, operator_id, epoch, parallelism,
                       max_parallelism, key_columns, to_arrow_schema(output, timezone="UTC"), conf.incremental,
                       chosen.checkpoint.metadata.to_bytes() if chosen.checkpoint else None, restore_url,
                       conf.local_dir, conf.batch_max_bytes, processing_time, conf.ttl_sweep_seconds,
                       subtask_event_time(job.event_time, restored_properties, function),
                       sink=job.sink.sink if job.sink is not None else None,
                       sink_run=job.sink.run if job.sink is not None else "0",
                       checkpoint_format=conf.checkpoint_format,
                       local_retention_seconds=conf.local_retention_seconds, key_types=job.key_types,
                       local_scope=job_scope(conf.storage, conf.checkpoint_dir, conf.storage_options, storage.durable),
                       key_serializer=key_serializer, trust_pickle=trusted, signed=signed, end_of_input=end_of_input,
                       late_schema=to_arrow_schema(df.schema, timezone="UTC") if job.side_output else None,
                       input_structs=INPUT_STRUCTS if job.inputs is not None and job.inputs.connected else (),
                       broadcast_rows=broadcast_rows, metrics=conf.metrics_enabled)

    run = SubtaskRun(spec)
    try:
        result = run.run(df, output, keep_output=job.sink is None)
    except BaseException:
        store.abort(epoch, [ack[0] for ack in run.states().values()])
        raise
    states = run.states()
    if len(states) != parallelism:
        store.abort(epoch, [ack[0] for ack in states.values()])
        raise SnapshotError(f"checkpoint {epoch} of job {job_id!r}: only subtasks {sorted(states)} of "
                            f"{parallelism} acknowledged; the checkpoint was aborted")
    operator = OperatorState(operator_id, parallelism, max_parallelism,
                             tuple(states[i][0] for i in range(parallelism)))
    recovery = {str(i): states[i][1] for i in range(parallelism)}
    properties = {"backend": spec.state_backend.name, "incremental": conf.incremental, "recovery": recovery,
                  PROCESSING_TIME: processing_time, FRESH_START: chosen.checkpoint is None,
                  RESTORE_POINT: chosen.checkpoint.checkpoint_id if chosen.checkpoint and restore_url is None else None,
                  **format_property(spec.state_backend, conf.incremental, conf.checkpoint_format),
                  **recorded_event_time(job.event_time, restored_properties, [states[i][2] for i in range(parallelism)],
                                        end_of_input)}
    if job.key_types:
        properties[KEY_SCHEMA] = {operator_id: [list(c) for c in zip(key_columns, job.key_types)]}
    if restore_url is not None:
        properties[RESTORED_FROM] = restore_url
    recorded = job.sink.property_of([ack[3] for ack in states.values() if ack[3] is not None]) if job.sink else None
    if recorded is not None:
        properties[SINK_PROPERTY] = recorded
    metrics = job.epoch_metrics(epoch, states, started, restored_properties)
    if metrics is not None:
        properties[METRICS_PROPERTY] = metrics.to_property()
    store.add(CheckpointMetadata(epoch, job_id, {operator_id: operator}, properties=properties))
    if job.sink is not None and recorded is not None:
        committing = time.perf_counter()
        job.sink.complete(epoch, recorded["outputs"], job.access.restore_streams())
        job.sink.abort_lingering()  # failed attempts' transactions
        if metrics is not None:
            metrics.sink_commit_ms = elapsed_ms(committing)
    if metrics is not None:
        job.last_metrics = metrics
        publish(metrics, job.listeners)
    return KeyedOutput(result, run.late_output) if run.late_output is not None else result


def check_key_types(properties: Mapping[str, Any], operator_id: str, key_columns: Sequence[str],
                    key_types: Sequence[str], restored: str) -> None:
    """Refuse to restore state keyed by columns of other types than the job's: a key's key group is
    Spark's hash of its typed columns (an int and a bigint hash apart), so every restored key
    would be looked for in another key group and its state silently not found."""
    columns = recorded_key_columns(properties, operator_id)
    if columns is None or not key_types:
        return  # not recorded (an older or a local runner's checkpoint)
    was = [c.type for c in columns]
    if key_hash_types(was) != key_hash_types(key_types):
        raise ConfigurationError(
            f"operator {operator_id!r} restores state from {restored} keyed by columns of types {was}, but the "
            f"job's key columns {list(key_columns)} have types {list(key_types)}: keys of other types hash to "
            f"other key groups and their state would not be found. Cast the key columns to {was} (e.g. "
            f"df.withColumn(name, df[name].cast('{was[0]}')))")


def _output_committed(sink: SinkCoordinator, store: CheckpointStore, epoch: int,
                      progress: StreamProgress | None) -> bool:
    """Whether ``epoch`` is a replayed micro-batch whose checkpoint this query completed, with its
    output (committed by ``recover``): Flink's rule, continue after the latest completed
    checkpoint, instead of computing the epoch and its output again."""
    done = [c for c in store.completed() if c.checkpoint_id == epoch]
    if not done or progress is None or sink.recorded(done[0].metadata) is None:
        return False
    owner = recorded_identity(done[0])
    return owner is not None and owner.same_as(progress.identity)


#: the stage's column of acknowledgements (a subtask's JSON record on its last row, else null)
ACKNOWLEDGEMENT_COLUMN = "__statekit_ack"
#: the stage's column of late rows, where the job has a side output of them (a struct of the input
#: row on a late row, else null)
LATE_COLUMN = "__statekit_late"
#: what ``run_subtask`` acknowledges: subtask index, snapshot (JSON), recovery, (largest event time of
#: each input, late rows), sink record (JSON or None), metrics (``TaskMetrics.to_json``, or None)
SubtaskAcknowledgementRecord = Tuple[int, str, str, Tuple[Sequence[int], int], Optional[str],
                                     Optional[Dict[str, Any]]]


class SubtaskRun:
    """One Spark stage running every subtask of ``spec`` over a DataFrame's rows, and what the
    subtasks acknowledged (their snapshots). The acknowledgements travel as data, the same on a
    classic and a Spark Connect session: each subtask's last row of the stage carries its
    acknowledgement in column ``ACKNOWLEDGEMENT_COLUMN`` (null on output rows), so only the
    attempts whose rows Spark kept (never a failed one) acknowledge."""

    def __init__(self, spec: SubtaskSpec) -> None:
        self.spec = spec
        self._acknowledgements: list[str] = []
        #: the late rows of the stage, where the job has a side output of them (``SubtaskSpec.late_schema``)
        self.late_output: DataFrame | None = None

    def run(self, df: DataFrame, output: StructType, keep_output: bool = True) -> DataFrame | None:
        """Run the stage now; returns its output, locally checkpointed (``keep_output``), or
        None when the subtasks wrote their output to a sink. The late rows of a side output are in
        ``late_output`` afterwards (locally checkpointed with the output, sink or not)."""
        spec = self.spec
        for name in (ACKNOWLEDGEMENT_COLUMN, LATE_COLUMN):
            if name in output.names:
                raise ConfigurationError(f"the output schema has a column {name!r}, the name statekit gives its own "
                                         f"column: rename it")
        side_output = spec.late_schema is not None
        engine_fields = [StructField(ACKNOWLEDGEMENT_COLUMN, StringType())]
        if side_output:
            engine_fields.append(StructField(LATE_COLUMN, df.schema))
        stage_schema = StructType([*output.fields, *engine_fields])
        arrow_schema = to_arrow_schema(stage_schema, timezone="UTC")

        def subtask(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            context = TaskContext.get()
            assert context is not None
            index = context.partitionId()  # partition i holds subtask i's rows
            key_groups = KeyGroupRange.of_subtask(spec.max_parallelism, spec.parallelism, index)
            acknowledged: list[SubtaskAcknowledgementRecord] = []
            late: list[pa.RecordBatch] = []
            for batch in run_subtask(spec, index, _of_subtask(batches, key_groups, index), acknowledged.append,
                                     late.append if side_output else None):
                engine = [pa.nulls(batch.num_rows, field.type) for field in list(arrow_schema)[batch.num_columns:]]
                yield pa.RecordBatch.from_arrays([*batch.columns, *engine], schema=arrow_schema)
                yield from _late_batches(arrow_schema, late)
            yield from _late_batches(arrow_schema, late)
            for record in acknowledged:
                yield acknowledgement_batch(arrow_schema, json.dumps(record))

        planned = _plan(df, spec.key_columns, spec.parallelism, spec.max_parallelism)
        # mapInArrow keeps the p partitions as they are (no sort, no grouping), and runs its function on
        # an empty partition too: p subtasks run as p tasks
        stage = planned.mapInArrow(subtask, stage_schema)
        acknowledgement = F.col(ACKNOWLEDGEMENT_COLUMN)
        with _session_conf(df.sparkSession, ARROW_BATCH_ROWS_SETTING, str(ARROW_BATCH_ROWS)):
            try:
                if keep_output or side_output:
                    stage = materialized(stage)
                rows = stage.where(acknowledgement.isNotNull()).select(acknowledgement).collect()
            except Exception as exc:
                raised = worker_error(exc)
                if raised is None:
                    raise
                raise raised from exc
        self._acknowledgements = [row[0] for row in rows]
        outputs = acknowledgement.isNull()
        if side_output:
            late = F.col(LATE_COLUMN)
            self.late_output = stage.where(late.isNotNull()).select(f"{LATE_COLUMN}.*")
            outputs = outputs & late.isNull()
        return stage.where(outputs).select(*output.names) if keep_output else None

    def states(self) -> dict[int, SubtaskAcknowledgement]:
        """The snapshot of each subtask that acknowledged, how it recovered, its (largest event
        time, late rows) and the record of its output in the sink (None: no sink); none before
        the stage succeeded."""
        return _subtask_states([json.loads(record) for record in self._acknowledgements], self.spec.parallelism)


def acknowledgement_batch(schema: pa.Schema, record: str) -> pa.RecordBatch:
    """One row of the stage's ``schema`` carrying ``record`` (``_engine_rows``)."""
    return _engine_rows(schema, ACKNOWLEDGEMENT_COLUMN, pa.array([record], pa.string()))


def _late_batches(schema: pa.Schema, late: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The late rows set aside so far as rows of the stage's ``schema``, taken out of ``late``."""
    while late:
        batch = late.pop(0)
        yield _engine_rows(schema, LATE_COLUMN, pa.StructArray.from_arrays(
            batch.columns, fields=list(schema.field(LATE_COLUMN).type)))


def _engine_rows(schema: pa.Schema, name: str, values: pa.Array) -> pa.RecordBatch:
    """Rows of the stage's ``schema`` carrying ``values`` in the engine's column ``name``: null in
    every other nullable column, and a placeholder in every NOT NULL one (Spark reads every value
    of a NOT NULL column and fails on a null; the rows are filtered out before anything sees
    those values)."""
    n = len(values)
    columns = [values if field.name == name
               else pa.nulls(n, field.type) if field.nullable else pa.array([_placeholder(field.type)] * n, field.type)
               for field in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _placeholder(arrow_type: pa.DataType) -> Any:
    """A value of ``arrow_type`` (as Python gives it to Arrow) that is no null, nor holds one where
    the type forbids it."""
    if pa.types.is_struct(arrow_type):
        return {field.name: None if field.nullable else _placeholder(field.type) for field in arrow_type}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_map(arrow_type):
        return []
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return ""
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return b""
    if pa.types.is_boolean(arrow_type):
        return False
    if pa.types.is_decimal(arrow_type):
        return decimal.Decimal(0)
    if pa.types.is_floating(arrow_type):
        return 0.0
    if pa.types.is_interval(arrow_type):
        return (0, 0, 0)  # months, days, nanoseconds
    return 0  # integers, dates, times, timestamps, durations


#: the last line of a Python worker's traceback that raised a statekit error (class and message)
_WORKER_ERROR = re.compile(r"^(statekit(?:\.\w+)+)\.(\w+): (.*)$", re.MULTILINE)


def worker_error(exc: BaseException) -> StatekitError | None:
    """The statekit error a subtask raised in a Python worker, raised again on the driver: Spark
    reports it as its own error (``PythonException``, within a failed job's) whose text holds the
    worker's traceback. None when the failure was no statekit error."""
    found = _WORKER_ERROR.findall(str(exc))
    if not found:
        return None
    module, name, message = found[-1]
    try:
        error_class = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    if not (isinstance(error_class, type) and issubclass(error_class, StatekitError)):
        return None
    try:
        return error_class(f"{message} (raised in a Spark task; Spark's error, with the worker's traceback, is "
                           f"the cause)")
    except TypeError:  # a subclass that takes other arguments
        return None


def _of_subtask(batches: Iterator[pa.RecordBatch], key_groups: KeyGroupRange, index: int) -> Iterator[pa.RecordBatch]:
    """The batches of one partition, checked to hold only subtask ``index``'s key groups and marker."""
    for batch in batches:
        column = batch.column(KEY_GROUP_COLUMN)
        bounds = pc.min_max(column).as_py()
        if bounds["min"] is not None and not key_groups.start <= bounds["min"] <= bounds["max"] <= key_groups.end:
            bounds = pc.min_max(pc.filter(column, rows_mask(batch))).as_py()  # without the marker
            markers = pc.unique(pc.filter(column, pc.less(column, 0))).to_pylist()
            if (bounds["min"] is not None and (bounds["min"] < key_groups.start or bounds["max"] > key_groups.end)
                    or markers not in ([], [-index - 1])):
                raise SnapshotError(f"the partition of subtask {index} (key groups {key_groups.start}.."
                                    f"{key_groups.end}) holds key groups {bounds['min']}..{bounds['max']} and "
                                    f"markers {markers}: Spark did not keep statekit's partitioning")
        yield batch


@contextlib.contextmanager
def _session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` while statekit's stage runs, then as it was."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def _plan(df: DataFrame, key_columns: tuple[str, ...], parallelism: int, max_parallelism: int) -> DataFrame:
    """Each row's key group in Spark SQL, plus one marker row per subtask (key group ``-(i + 1)``),
    partitioned so that partition i holds subtask i's rows and marker: ``repartitionById`` places
    a row by the number it is given, and one exchange by number is what Spark never coalesces."""
    key_group = F.pmod(F.xxhash64(*key_columns), F.lit(max_parallelism)).cast("int")
    rows = df.withColumn(KEY_GROUP_COLUMN, key_group)
    markers = df.sparkSession.range(parallelism).select(
        *[F.lit(None).cast(df.schema[c].dataType).alias(c) for c in df.columns],
        (-F.col("id") - 1).cast("int").alias(KEY_GROUP_COLUMN))
    kg = F.col(KEY_GROUP_COLUMN)
    subtask = F.when(kg < 0, -kg - 1).otherwise(F.expr(f"{KEY_GROUP_COLUMN} * {parallelism} div {max_parallelism}"))
    return rows.unionByName(markers).repartitionById(parallelism, subtask.cast("int"))  # Flink's operator index


def _subtask_states(acknowledgements: list, parallelism: int) -> dict[int, SubtaskAcknowledgement]:
    """One acknowledgement per subtask; a repeated one replaces the earlier one. Failed attempts'
    rows never reach the stage's result."""
    states: dict[int, SubtaskAcknowledgement] = {}
    for index, payload, recovery, event_time, sink_entry, *rest in acknowledgements:
        if 0 <= index < parallelism:
            metrics = rest[0] if rest and isinstance(rest[0], dict) else None  # absent from an older executor's
            states[index] = (SubtaskState.from_json(json.loads(payload)), recovery, tuple(event_time),
                             json.loads(sink_entry) if sink_entry is not None else None,
                             TaskMetrics.from_json(metrics) if metrics is not None else None)
    return states
