"""The task side of a sink: one subtask's output of one epoch goes into the sink's transaction (a
two-phase-commit sink) or into a log in checkpoint storage (a write-ahead sink) instead of back to
the engine, and ``finish`` returns the record the subtask acknowledges with its snapshot.
"""
from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from statekit.spi.errors import SinkError
from statekit.spi.handles import StateHandle, StreamStateHandle
from statekit.spi.sinks import Sink, SinkContext, TwoPhaseCommitSink, WriteAheadSink
from statekit.spi.storage import CheckpointStreams, StateScope

log = logging.getLogger(__name__)
#: the file name prefix of a write-ahead sink's log in a checkpoint's directory
WRITE_AHEAD_LOG_NAME = "sink-log"


def check_sink(sink: Any) -> Sink:
    if not isinstance(sink, (TwoPhaseCommitSink, WriteAheadSink)):
        raise SinkError(f"{type(sink).__name__} is not a sink: subclass statekit.spi.sinks.TwoPhaseCommitSink or "
                        f"WriteAheadSink (or pass a function (DataFrame, batch_id) for at-least-once output)")
    return sink


class SubtaskSinkWriter:
    def __init__(self, sink: Sink, context: SinkContext, streams: CheckpointStreams, schema: pa.Schema) -> None:
        self.sink, self.context = sink, context
        self.rows = 0
        self._finished = False
        self._transaction: Any = None
        if isinstance(sink, TwoPhaseCommitSink):
            self._transaction = sink.begin_transaction(context)
        else:
            self._log = streams.create_output(StateScope.EXCLUSIVE, name=f"{WRITE_AHEAD_LOG_NAME}-{context.subtask}")
            self._writer = pa.ipc.new_stream(self._log, schema)

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        if isinstance(self.sink, TwoPhaseCommitSink):
            self.sink.write(self._transaction, batch)
        else:
            self._writer.write_batch(batch)

    def finish(self) -> dict[str, Any]:
        """Pre-commit the transaction (or close the log); the record the coordinator commits."""
        entry: dict[str, Any] = {"subtask": self.context.subtask, "epoch": self.context.epoch, "rows": self.rows}
        if isinstance(self.sink, TwoPhaseCommitSink):
            entry["transaction"] = self.sink.pre_commit(self._transaction)
        else:
            self._writer.close()
            entry["log"] = self._log.close_and_get_handle().to_json()
        self._finished = True
        return entry

    def abort(self) -> None:
        """The subtask failed before ``finish``: roll back (best effort; lingering transactions are
        aborted by the coordinator too). After ``finish`` only the coordinator ends a transaction:
        one that no completed checkpoint records lingers until it aborts it."""
        if self._finished:
            return
        try:
            if isinstance(self.sink, TwoPhaseCommitSink):
                self.sink.abort(self._transaction)
            else:
                self._log.discard()
        except Exception as exc:  # noqa: BLE001 - an error is already propagating
            log.warning("aborting the output of %s failed: %s", self.context.transaction_id, exc)


def _log_handle(entry: dict[str, Any]) -> StreamStateHandle:
    handle = StateHandle.from_json(entry["log"])
    if not isinstance(handle, StreamStateHandle):
        raise SinkError(f"the write-ahead log of subtask {entry['subtask']} is recorded as a "
                        f"{type(handle).__name__}, not a stream")
    return handle


def logged_output(entry: dict[str, Any], streams: CheckpointStreams) -> pa.Table:
    """The rows a write-ahead sink's subtask logged, read back from checkpoint storage."""
    return pa.ipc.open_stream(pa.BufferReader(streams.read(_log_handle(entry)))).read_all()


def with_logs_copied(recorded: dict[str, Any], source: CheckpointStreams, target: CheckpointStreams) -> dict[str, Any]:
    """A checkpoint's ``sink`` record for a savepoint: the write-ahead logs it names copied from the
    checkpoint (``source``) into the savepoint (``target``), which must not depend on the checkpoint's
    files; the records of two-phase-commit transactions name the target's transactions and stay."""
    outputs = []
    for entry in recorded.get("outputs", []):
        if "log" in entry:
            copy = target.create_output(StateScope.EXCLUSIVE, name=f"{WRITE_AHEAD_LOG_NAME}-{entry['subtask']}")
            copy.write(source.read(_log_handle(entry)))
            entry = {**entry, "log": copy.close_and_get_handle().to_json()}
        outputs.append(entry)
    return {**recorded, "outputs": outputs}
