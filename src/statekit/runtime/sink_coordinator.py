"""The coordinator side of a sink (``spi.sinks``): it records each subtask's pre-committed output
in the epoch's checkpoint, commits (or publishes) it once the checkpoint is complete, and after a
failure finishes what the latest completed checkpoint recorded and aborts everything else.

The order is what makes the output exactly once:

1. subtasks write and pre-commit (or log) their output, then acknowledge with their snapshots;
2. the checkpoint's ``_metadata`` is written with the records (property ``sink``): from here on
   the output is the epoch's, and will be committed whatever fails;
3. the records are committed (transient errors retried with backoff);
4. transactions no completed checkpoint records (failed attempts, crashed runs) are aborted.

A crash before 2 leaves lingering transactions, which the next run aborts (4) before it computes
the epoch again; a crash after 2 leaves a complete checkpoint, whose records the next run commits
again (3; a no-op for what was committed) instead of computing the epoch again.

An epoch that restores another job's checkpoint or a savepoint (``spark.statekit.restore.path``)
first commits the output that snapshot records, as Flink commits the pending transactions of the
checkpoint it restores: the restored state includes that epoch, so its output must be there too.
Commits are idempotent, and write-ahead output is published under the source job's key, so output
the source job committed already is not committed twice.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.runtime.sink_writer import logged_output
from statekit.spi.errors import SinkError, TransactionLostError
from statekit.spi.sinks import DISCARDING_KIND, Sink, SinkContext, TwoPhaseCommitSink, WriteAheadSink
from statekit.spi.storage import CheckpointStreams

log = logging.getLogger(__name__)
#: the checkpoint property that records an operator's pre-committed output
SINK_PROPERTY = "sink"
#: the setting that lets a job continue past a transaction its target lost
IGNORE_LOST_SETTING = "spark.statekit.sink.ignore-lost-transactions"
T = TypeVar("T")
_KEPT = ("Nothing is lost: the completed checkpoint records this output, and running the job again (once the cause is "
         "fixed) commits it")
_UNCOMMITTED = ("No output is lost: these transactions were never committed, and running the job again (once the cause "
                "is fixed) aborts them")


@dataclass(frozen=True)
class RetryPolicy:
    """How often a commit or publication is tried, and the waits between tries (doubling)."""

    attempts: int = 5
    first_wait_s: float = 0.2
    max_wait_s: float = 5.0


class SinkCoordinator:
    def __init__(self, sink: Sink, job_id: str, operator_id: str, retry: RetryPolicy = RetryPolicy(),
                 ignore_lost: bool = False) -> None:
        self.sink, self.job_id, self.operator_id = sink, job_id, operator_id
        self.retry, self.ignore_lost = retry, ignore_lost
        #: unique to this run: part of every transaction id it begins
        self.run = uuid.uuid4().hex[:12]
        self._recovered = False

    # --- the checkpoint's record
    def property_of(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """The ``sink`` property of the epoch's checkpoint, from the subtasks' acknowledgements."""
        return {"operator": self.operator_id, "kind": self.sink.kind,
                "outputs": sorted(entries, key=lambda e: e["subtask"])}

    def recorded(self, metadata: CheckpointMetadata, restored_from: str | None = None) -> list[dict[str, Any]] | None:
        """The output a checkpoint recorded for this operator (None: none recorded);
        ``restored_from``: the URL of another job's snapshot the checkpoint is."""
        recorded = metadata.properties.get(SINK_PROPERTY)
        if not isinstance(recorded, dict) or recorded.get("operator") != self.operator_id:
            return None
        if recorded.get("kind") == DISCARDING_KIND:  # recorded, so the epoch is done, but nothing to commit
            return []
        if recorded.get("kind") != self.sink.kind:
            where = (f"the restored snapshot {restored_from} (job {metadata.job_id!r})" if restored_from else
                     f"checkpoint {metadata.checkpoint_id} of job {self.job_id!r}")
            fix = (f"run job {metadata.job_id!r} once more with the sink it had, so that this output is committed, "
                   f"then restore its new checkpoint; or set {IGNORE_LOST_SETTING}=true to start without committing "
                   f"it" if restored_from else
                   "run it once more with the sink it had, so that this output is committed, then switch")
            if restored_from and self.ignore_lost:
                log.error("%s records output of a %s sink, which %s cannot commit: continuing without it (%s=true)",
                          where, recorded.get("kind"), self.sink.describe(), IGNORE_LOST_SETTING)
                return None
            raise SinkError(f"{where} records output of a {recorded.get('kind')} sink, but the job now writes to "
                            f"{self.sink.describe()}, a {self.sink.kind} sink: {fix}")
        return list(recorded.get("outputs", []))

    # --- the steps
    def recover(self, latest: CheckpointMetadata | None, streams: CheckpointStreams) -> None:
        """Once per run, before its first epoch: commit what the latest completed checkpoint
        recorded, then abort every other transaction the sink still holds for the operator."""
        if self._recovered:
            return
        self.sink.prepare_target(self.job_id, self.operator_id)
        entries = self.recorded(latest) if latest is not None else None
        if entries is not None:
            assert latest is not None
            self.complete(latest.checkpoint_id, entries, streams, recovering=True)
        self.abort_lingering()
        self._recovered = True

    def commit_restored(self, restored: CheckpointMetadata, url: str, streams: CheckpointStreams) -> None:
        """Commit the output that another job's snapshot at ``url`` records (``streams`` read its
        files), before the epoch that restores it runs."""
        entries = self.recorded(restored, url)
        if entries:
            self.complete(restored.checkpoint_id, entries, streams, recovering=True, source=(restored.job_id, url))

    def complete(self, checkpoint_id: int, entries: list[dict[str, Any]], streams: CheckpointStreams,
                 recovering: bool = False, source: tuple[str, str] | None = None) -> None:
        """Commit (publish) the output of a completed checkpoint; ``source``: the job id and URL
        of another job's snapshot it is."""
        job_id = source[0] if source is not None else self.job_id
        for entry in entries:
            what = f"the output of subtask {entry['subtask']} in checkpoint {checkpoint_id} of job {job_id!r}"
            if source is not None:
                what += f" (restored from {source[1]})"
            try:
                if isinstance(self.sink, TwoPhaseCommitSink):
                    commit = self.sink.recover_and_commit if recovering else self.sink.commit
                    self._retrying(lambda: commit(entry["transaction"]), f"committing {what}", _KEPT)
                else:
                    assert isinstance(self.sink, WriteAheadSink)
                    publish = self.sink.publish
                    context = SinkContext(job_id, self.operator_id, int(entry["epoch"]), int(entry["subtask"]))
                    rows = logged_output(entry, streams)
                    self._retrying(lambda: publish(context, rows.to_batches()), f"publishing {what}", _KEPT)
            except TransactionLostError as exc:
                if not self.ignore_lost:
                    cause = (f"does this job's sink write to the target job {job_id!r} wrote to?"
                             if source is not None else
                             "was the transaction rolled back by hand, or did the target expire it?")
                    raise TransactionLostError(
                        f"{what}: {exc}. The checkpoint and the state are intact, but these {entry.get('rows', '?')} rows can "
                        f"no longer be committed to {self.sink.describe()} ({cause}). To continue without them, set "
                        f"{IGNORE_LOST_SETTING}=true and run the job again") from exc
                log.error("%s: lost, continuing (%s=true): %s", what, IGNORE_LOST_SETTING, exc)

    def abort_lingering(self) -> None:
        """Abort the operator's transactions no completed checkpoint's commit will ever finish."""
        if not isinstance(self.sink, TwoPhaseCommitSink):
            return
        sink = self.sink
        lingering = self._retrying(lambda: sink.lingering(self.job_id, self.operator_id),
                                   f"listing the lingering transactions of job {self.job_id!r}", _UNCOMMITTED)
        for record in lingering:
            log.info("aborting lingering transaction %s", record)
            self._retrying(lambda: sink.recover_and_abort(record), f"aborting the lingering transaction {record}",
                           _UNCOMMITTED)

    def _retrying(self, action: Callable[[], T], what: str, outcome: str) -> T:
        wait = self.retry.first_wait_s
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return action()
            except TransactionLostError:
                raise
            except Exception as exc:  # noqa: BLE001 - the sink decides what is worth retrying
                transient = self.sink.is_transient(exc)
                if transient and attempt < self.retry.attempts:
                    log.warning("%s failed (attempt %d of %d), retrying in %.1f s: %s", what, attempt,
                                self.retry.attempts, wait, exc)
                    time.sleep(wait)
                    wait = min(wait * 2, self.retry.max_wait_s)
                    continue
                tries = f"{attempt} attempts" if transient else "a permanent error"
                raise SinkError(f"{what} ({self.sink.describe()}) failed after {tries}: {type(exc).__name__}: "
                                f"{exc}. {outcome}") from exc
        raise AssertionError("unreachable")
