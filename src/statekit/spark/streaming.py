"""Keyed stateful processing of a streaming DataFrame: one epoch and one checkpoint per
micro-batch, through ``foreachBatch``, with a sink the user chooses.

::

    query = process_keyed_stream(readings, keys="sensor", function=SensorAlerts(),
                                 schema="sensor string, alert string",
                                 sink=lambda alerts, batch_id: alerts.write.mode("append").parquet(out),
                                 checkpoint_location=spark_checkpoint_dir)

Micro-batch ``b`` is epoch ``b + 1`` and restores from the latest completed checkpoint with a lower
id. When Spark replays a micro-batch after a failure or restart, the epoch is recomputed from the
same restore point and its checkpoint replaces the earlier attempt's, so state is exactly once.

The output is exactly once too when ``sink`` is a transactional sink (``statekit.sinks``: a
``TwoPhaseCommitSink`` or a ``WriteAheadSink``): the subtasks write it into the sink, and it is
committed once the epoch's checkpoint is complete (``runtime.sink_coordinator``). A function
``sink(output, batch_id)`` gets the output as a DataFrame, as any ``foreachBatch`` sink, and sees
a replayed micro-batch's output again: at least once, unless it writes idempotently by
``batch_id``.

Every micro-batch reads the query's Spark checkpoint (``spark.query_checkpoint``): an epoch never
restores older state than Spark's commit log says was committed (``spark.restore_point``), and
the job belongs to the query (Spark's query id): another query, or bounded runs, with the same
job id are refused (``checkpoint.ownership``).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from statekit.checkpoint.ownership import check_identity
from statekit.checkpoint.signing import signing
from statekit.runtime.event_time import duration_ms
from statekit.runtime.function import ProcessFunction
from statekit.spark.conf import PREFIX, StatekitConf
from statekit.runtime.metrics import EpochMetrics, MetricsListener
from statekit.spark.keyed import KeyedJob, KeyedOutput
from statekit.spark.progress import MetricsBuffer, with_metrics
from statekit.spark.query_checkpoint import QueryCheckpoint
from statekit.spark.restore_point import StreamProgress
from statekit.spark.session import is_connect
from statekit.spi.errors import ConfigurationError
from statekit.spi.sinks import Sink


def process_keyed_stream(df: DataFrame, keys: str | Sequence[str], function: ProcessFunction,
                         schema: str | StructType, sink: Callable[[DataFrame, int], Any] | Sink, *,
                         checkpoint_location: str, operator_id: str = "keyed-process", job_id: str | None = None,
                         conf: StatekitConf | None = None, trigger: dict[str, Any] | None = None,
                         query_name: str | None = None, event_time: str | None = None, watermark_delay: Any = None,
                         late_rows: str = "drop", heartbeat: Any = None,
                         pre_aggregate: Mapping[str, Column] | None = None,
                         late_sink: Callable[[DataFrame, int], Any] | None = None,
                         listener: MetricsListener | None = None) -> StreamingQuery:
    """Start the streaming query; ``trigger`` takes ``DataStreamWriter.trigger`` keywords.

    ``event_time``, ``watermark_delay``, ``late_rows``: as for ``process_keyed``; micro-batch N's
    watermark comes from the event times of the batches before it, so a replayed batch fires the
    same timers. Spark runs no micro-batch while no source has new data, so time stands still
    then: ``heartbeat`` (e.g. ``"1 minute"``) adds a source that has data every micro-batch and
    triggers one every interval (unless ``trigger`` says otherwise), so processing time, and the
    processing-time timers due by it, keep advancing when the input is quiet. The watermark moves
    only with event times that arrive, as in Spark and Flink. ``pre_aggregate``: as for
    ``process_keyed``, per micro-batch. ``late_rows="side_output"`` needs ``late_sink(df,
    batch_id)``: it gets each micro-batch's late rows once the micro-batch's checkpoint is
    complete (after ``sink``), again when Spark replays the micro-batch, as a function sink is
    called; a transactional ``sink`` does not compute a micro-batch whose output it committed
    again, so its late rows are delivered then only if the first attempt got as far.

    The query returned is a ``spark.progress.StatekitStreamingQuery``: its ``lastProgress`` and
    ``recentProgress`` carry each micro-batch's metrics in ``observedMetrics["statekit"]``.
    ``listener``: called with each micro-batch's ``runtime.metrics.EpochMetrics`` where the
    micro-batches run (the driver on a classic session, the Connect server's Python process)."""
    check_streaming(df)
    transactional = check_stream_sink(sink)
    job = KeyedJob.create(df.sparkSession, df.schema, keys, function, schema, operator_id, job_id, conf,
                          event_time, watermark_delay, late_rows, transactional, pre_aggregate)
    return start_stream(job, df, sink, late_sink, checkpoint_location, trigger, query_name, heartbeat, listener)


def check_streaming(*inputs: DataFrame) -> None:
    if not all(df.isStreaming for df in inputs):
        raise ConfigurationError("a streaming query needs streaming DataFrames (spark.readStream...); process a "
                                 "bounded one with the bounded call (process_keyed, process_connected, "
                                 "process_broadcast)")


def check_stream_sink(sink: Any) -> Sink | None:
    """The transactional sink of a query (None: ``sink`` is a function), or a ``ConfigurationError``."""
    if isinstance(sink, type) and issubclass(sink, Sink):
        raise ConfigurationError(f"sink={sink.__name__} is a sink class: pass a sink, e.g. {sink.__name__}(...) with "
                                 f"its target")
    if not isinstance(sink, Sink) and not callable(sink):
        raise ConfigurationError(f"sink={sink!r} is neither a sink (statekit.sinks) nor a function (DataFrame, "
                                 f"batch_id)")
    return sink if isinstance(sink, Sink) else None


def start_stream(job: KeyedJob, df: DataFrame, sink: Callable[[DataFrame, int], Any] | Sink,
                 late_sink: Callable[[DataFrame, int], Any] | None, checkpoint_location: str,
                 trigger: dict[str, Any] | None, query_name: str | None, heartbeat: Any,
                 listener: MetricsListener | None = None) -> StreamingQuery:
    """Start the ``foreachBatch`` query that runs ``job`` on ``df`` (for two inputs, the inputs
    tagged into one DataFrame, ``spark.inputs``), micro-batch b as epoch b + 1."""
    job.add_listener(listener)
    if late_sink is not None and not callable(late_sink):
        raise ConfigurationError(f"late_sink={late_sink!r} is not a function (DataFrame, batch_id)")
    if job.side_output != (late_sink is not None):
        raise ConfigurationError("late_rows='side_output' and late_sink go together: late_sink(df, batch_id) gets the "
                                 "late rows of each micro-batch; give both, or neither")
    if is_connect(df.sparkSession) and not job.storage.durable:
        raise ConfigurationError(
            f"the checkpoint storage {job.storage.name!r} keeps checkpoints in the memory of the process that "
            f"coordinates them; on a Spark Connect session a streaming query's micro-batches are coordinated by a "
            f"Python process of the Connect server, whose memory this client neither sees nor keeps: set "
            f"{PREFIX}checkpoint.storage=filesystem (with {PREFIX}checkpoint.dir) or another durable storage")
    if heartbeat is not None:
        interval_ms = duration_ms(heartbeat, "heartbeat")
        df = with_heartbeat(df)
        trigger = trigger or {"processingTime": f"{max(interval_ms, 1)} milliseconds"}
    query_checkpoint = QueryCheckpoint(checkpoint_location)
    # fail before the query starts when the job belongs to another query (checked again, with the
    # query's id, on the first micro-batch)
    check_identity(job.job_id, query_checkpoint.identity(), job.store(streaming=True).latest(), job.conf.take_over)

    def recorded_metrics(batch_id: int) -> EpochMetrics | None:
        with signing(job.conf.signing_secret):
            done = job.store(streaming=True).attempt(batch_id + 1)
        return None if done is None else EpochMetrics.from_properties(job.job_id, job.operator_id, batch_id + 1,
                                                                      done.metadata.properties)

    metrics = MetricsBuffer(recorded_metrics)

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        progress = StreamProgress(query_checkpoint.identity(), checkpoint_location,
                                  query_checkpoint.last_committed_batch(), query_checkpoint.batch_timestamp_ms(batch_id))
        if heartbeat is not None:
            batch = without_heartbeat(batch)
        result = job.run_epoch(batch, epoch=batch_id + 1, progress=progress)
        if job.last_metrics is not None:
            metrics.put(batch_id, job.last_metrics)
        output, late = result if isinstance(result, KeyedOutput) else (result, None)
        if output is not None:  # a function sink; a transactional one got the output already
            sink(output, batch_id)  # type: ignore[operator]
        if late is not None and late_sink is not None:
            late_sink(late, batch_id)

    writer = df.writeStream.foreachBatch(each_batch).option("checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    query = writer.start()
    return with_metrics(query, metrics) if job.conf.metrics_enabled else query


HEARTBEAT_COLUMN = "__statekit_heartbeat"


def with_heartbeat(df: DataFrame) -> DataFrame:
    """``df`` and one heartbeat row per micro-batch (Spark's ``rate-micro-batch`` source), told
    apart by a column that ``without_heartbeat`` drops with the heartbeat rows."""
    beats = df.sparkSession.readStream.format("rate-micro-batch").option("rowsPerBatch", 1).load()
    return df.withColumn(HEARTBEAT_COLUMN, F.lit(False)).unionByName(beats.select(
        *[F.lit(None).cast(field.dataType).alias(field.name) for field in df.schema.fields],
        F.lit(True).alias(HEARTBEAT_COLUMN)))


def without_heartbeat(batch: DataFrame) -> DataFrame:
    return batch.where(~F.col(HEARTBEAT_COLUMN)).drop(HEARTBEAT_COLUMN)
