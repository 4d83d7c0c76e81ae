"""Jobs of two inputs under Spark: connected keyed inputs (a ``KeyedCoProcessFunction``), and the
broadcast state pattern (a ``KeyedBroadcastProcessFunction``), bounded or streaming.

::

    alerts = process_connected(orders, payments, "order_id", UnpaidOrders(), "order_id string, alert string",
                               event_time="ts", watermark_delay={"left": "5 minutes", "right": "1 minute"})
    flagged = process_broadcast(readings, thresholds, "sensor", Thresholds(), "sensor string, value double")

Both inputs travel as one tagged DataFrame through the stage of a one-input job (``spark.inputs``),
so an epoch of two inputs is one checkpoint, restores, rescales and switches backends as any, and
a streaming query of two sources is one query (its micro-batches, and their replays, hold the same
rows of both sources). The watermark of two inputs is the smaller of theirs (``InputsEventTime``).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from statekit.runtime.function import KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from statekit.runtime.metrics import MetricsListener
from statekit.spark.conf import StatekitConf
from statekit.spark.inputs import connected, with_broadcast
from statekit.spark.keyed import KeyedJob
from statekit.spark.streaming import check_stream_sink, check_streaming, start_stream
from statekit.spi.errors import ConfigurationError
from statekit.spi.sinks import Sink


def process_connected(left: DataFrame, right: DataFrame, keys: Any, function: KeyedCoProcessFunction,
                      schema: str | StructType, *, operator_id: str = "keyed-process", job_id: str | None = None,
                      conf: StatekitConf | None = None, processing_time_ms: int | None = None,
                      event_time: Any = None, watermark_delay: Any = None, late_rows: str = "drop",
                      end_of_input: bool = False, listener: MetricsListener | None = None) -> DataFrame:
    """Process two bounded DataFrames keyed alike as the job's next epoch; returns the output.
    ``function.process_left`` gets the rows of ``left`` and ``process_right`` those of ``right``,
    with the key's state and timers shared. ``keys``: the key columns of both (a name or a list),
    or a dict of one per input (``{"left": "order_id", "right": "order"}``), of the same types.
    ``event_time`` and ``watermark_delay``: one value for both inputs or a dict of one per input;
    the watermark is the smaller of the two inputs' (and waits until both have had event times).
    The other arguments (``listener`` too) are ``process_keyed``'s."""
    _check_bounded(left, right)
    tagged, key_columns, inputs = connected(left, right, keys)
    job = KeyedJob.create(left.sparkSession, tagged.schema, key_columns, function, schema, operator_id, job_id, conf,
                          event_time, watermark_delay, late_rows, inputs=inputs)
    return _bounded_epoch(job, tagged, processing_time_ms, end_of_input, listener)


def process_broadcast(df: DataFrame, broadcast: DataFrame, keys: str | Sequence[str],
                      function: KeyedBroadcastProcessFunction, schema: str | StructType, *,
                      broadcast_order: str | Sequence[str] | None = None, operator_id: str = "keyed-process",
                      job_id: str | None = None, conf: StatekitConf | None = None,
                      processing_time_ms: int | None = None, event_time: str | None = None,
                      watermark_delay: Any = None, late_rows: str = "drop", end_of_input: bool = False,
                      listener: MetricsListener | None = None) -> DataFrame:
    """Process a bounded keyed DataFrame with a broadcast one as the job's next epoch (Flink's
    broadcast state pattern); returns the output. Every subtask processes all of ``broadcast``'s
    rows first (``function.process_broadcast``, which keeps what they say in broadcast state),
    in the order of ``broadcast_order`` (columns; default: as collected), then its keyed rows
    (``function.process``). Broadcast rows carry no event time. The other arguments are
    ``process_keyed``'s."""
    _check_bounded(df, broadcast)
    tagged, inputs = with_broadcast(df, broadcast, broadcast_order)
    job = KeyedJob.create(df.sparkSession, df.schema, keys, function, schema, operator_id, job_id, conf,
                          event_time, watermark_delay, late_rows, inputs=inputs)
    return _bounded_epoch(job, tagged, processing_time_ms, end_of_input, listener)


def process_connected_stream(left: DataFrame, right: DataFrame, keys: Any, function: KeyedCoProcessFunction,
                             schema: str | StructType, sink: Callable[[DataFrame, int], Any] | Sink, *,
                             checkpoint_location: str, operator_id: str = "keyed-process", job_id: str | None = None,
                             conf: StatekitConf | None = None, trigger: dict[str, Any] | None = None,
                             query_name: str | None = None, event_time: Any = None, watermark_delay: Any = None,
                             late_rows: str = "drop", heartbeat: Any = None,
                             listener: MetricsListener | None = None) -> StreamingQuery:
    """``process_connected`` over two streaming DataFrames, as one query: micro-batch N holds the
    new rows of both sources and is epoch N + 1; the other arguments are ``process_keyed_stream``'s."""
    check_streaming(left, right)
    tagged, key_columns, inputs = connected(left, right, keys)
    job = KeyedJob.create(left.sparkSession, tagged.schema, key_columns, function, schema, operator_id, job_id, conf,
                          event_time, watermark_delay, late_rows, check_stream_sink(sink), inputs=inputs)
    return start_stream(job, tagged, sink, None, checkpoint_location, trigger, query_name, heartbeat, listener)


def process_broadcast_stream(df: DataFrame, broadcast: DataFrame, keys: str | Sequence[str],
                             function: KeyedBroadcastProcessFunction, schema: str | StructType,
                             sink: Callable[[DataFrame, int], Any] | Sink, *, checkpoint_location: str,
                             broadcast_order: str | Sequence[str] | None = None, operator_id: str = "keyed-process",
                             job_id: str | None = None, conf: StatekitConf | None = None,
                             trigger: dict[str, Any] | None = None, query_name: str | None = None,
                             event_time: str | None = None, watermark_delay: Any = None, late_rows: str = "drop",
                             heartbeat: Any = None, listener: MetricsListener | None = None) -> StreamingQuery:
    """``process_broadcast`` over two streaming DataFrames, as one query: each micro-batch's
    broadcast rows reach every subtask before its keyed rows."""
    check_streaming(df, broadcast)
    tagged, inputs = with_broadcast(df, broadcast, broadcast_order)
    job = KeyedJob.create(df.sparkSession, df.schema, keys, function, schema, operator_id, job_id, conf,
                          event_time, watermark_delay, late_rows, check_stream_sink(sink), inputs=inputs)
    return start_stream(job, tagged, sink, None, checkpoint_location, trigger, query_name, heartbeat, listener)


def _bounded_epoch(job: KeyedJob, tagged: DataFrame, processing_time_ms: int | None, end_of_input: bool,
                   listener: MetricsListener | None) -> DataFrame:
    job.add_listener(listener)
    output = job.run_epoch(tagged, processing_time_ms=processing_time_ms, end_of_input=end_of_input)
    assert isinstance(output, DataFrame)  # a job without a sink returns its output
    return output


def _check_bounded(*inputs: DataFrame) -> None:
    if any(df.isStreaming for df in inputs):
        raise ConfigurationError("a streaming DataFrame in a bounded call: give bounded DataFrames, or run both "
                                 "inputs as streams (process_connected_stream, process_broadcast_stream)")
