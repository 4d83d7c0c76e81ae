"""Sinks that make a job's output exactly once end to end, tied to statekit's checkpoints (the
models are Flink's ``TwoPhaseCommitSinkFunction`` and ``GenericWriteAheadSink``).

``TwoPhaseCommitSink``, for targets with transactions: each subtask writes its epoch's output in a
transaction of its own and pre-commits it before acknowledging its snapshot; the coordinator
stores the pre-committed transactions' records in the checkpoint's metadata and commits them once
the checkpoint is complete. After a failure the transactions of the latest completed checkpoint
are committed again (``recover_and_commit``: nothing happens to one already committed) and every
other transaction the sink still holds for the job's operator is aborted (``lingering``,
``recover_and_abort``). A target therefore sees an epoch's output exactly when its checkpoint
completed.

``WriteAheadSink``, for targets without transactions: each subtask writes its output to checkpoint
storage as part of its snapshot, and the coordinator publishes it to the target once the
checkpoint is complete; ``publish`` must be idempotent by ``(job, operator, epoch, subtask)``
(e.g. it records that key in the same local transaction as the rows).

Sinks are pickled to the executors: keep connections out of ``__init__`` and open them in the
methods. A sink says which of its errors are worth retrying (``is_transient``); commits and
publications are retried with backoff, any other error stops the job with nothing lost (the
records stay in the completed checkpoint and are committed when the job runs again).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, Iterable, TypeVar

import pyarrow as pa

#: separates the parts of a transaction id; job and operator ids never contain it (``spi.names``)
TRANSACTION_ID_SEPARATOR = "~"
TRANSACTION_ID_PREFIX = "statekit"
#: the ``kind`` of a sink that writes nothing (``statekit.sinks.DiscardingSink``): what its
#: checkpoints record holds no output to commit, and its subtasks have no pre-commit work
DISCARDING_KIND = "discarding"

Transaction = TypeVar("Transaction")


@dataclass(frozen=True)
class SinkContext:
    """Which subtask of which epoch writes: a transaction's identity. ``run`` is a token unique to
    one run of the job and ``attempt`` the engine's id of the task attempt (unique within the run,
    also across retries of a stage), so a retried, speculative or zombie task or a new run never
    reuses the id of a transaction that may still linger."""

    job_id: str
    operator_id: str
    epoch: int
    subtask: int
    run: str = "0"
    attempt: int = 0

    @property
    def transaction_id(self) -> str:
        return transaction_prefix(self.job_id, self.operator_id) + TRANSACTION_ID_SEPARATOR.join(
            [str(self.epoch), str(self.subtask), self.run, str(self.attempt)])

    @property
    def publication_key(self) -> tuple[str, str, int, int]:
        """What a write-ahead sink's publication is idempotent by."""
        return self.job_id, self.operator_id, self.epoch, self.subtask


def transaction_prefix(job_id: str, operator_id: str) -> str:
    """The start of every transaction id of one job's operator (what ``lingering`` looks for)."""
    return TRANSACTION_ID_SEPARATOR.join([TRANSACTION_ID_PREFIX, job_id, operator_id]) + TRANSACTION_ID_SEPARATOR


class Sink(ABC):
    """What both kinds of sink share."""

    #: the kind recorded in the checkpoint, so a restart knows how to finish what it finds there
    kind: str = ""

    def prepare_target(self, job_id: str, operator_id: str) -> None:
        """Called on the driver before the job's first epoch of a run: create what the sink needs
        in its target (bookkeeping tables, directories). Default: nothing."""

    def is_transient(self, error: BaseException) -> bool:
        """Whether retrying the failed commit or publication may succeed (a lost connection, a
        timeout). Default: connection errors and timeouts."""
        return isinstance(error, (ConnectionError, TimeoutError))

    def describe(self) -> str:
        """How errors name the sink's target."""
        return type(self).__name__


class TwoPhaseCommitSink(Sink, Generic[Transaction]):
    """A target with transactions. Task side (executors): ``begin_transaction``, ``write``,
    ``pre_commit`` (or ``abort``). Coordinator side (the driver): ``commit``, and after a failure
    ``recover_and_commit``, ``lingering`` and ``recover_and_abort``. The record ``pre_commit``
    returns is JSON stored in the checkpoint's metadata: everything the coordinator needs to
    commit or abort the transaction from another process."""

    kind = "two-phase-commit"

    @abstractmethod
    def begin_transaction(self, context: SinkContext) -> Transaction:
        """Start the subtask's transaction for the epoch (``context.transaction_id`` names it)."""

    @abstractmethod
    def write(self, transaction: Transaction, batch: pa.RecordBatch) -> None:
        """Write output rows into the transaction; nothing is visible in the target yet."""

    @abstractmethod
    def pre_commit(self, transaction: Transaction) -> dict[str, Any]:
        """Make the transaction durable and committable from any process (flush files, ``PREPARE
        TRANSACTION``); returns its JSON record. After this, only ``commit`` or an abort ends it."""

    @abstractmethod
    def abort(self, transaction: Transaction) -> None:
        """Roll back a transaction that was not pre-committed (the task failed)."""

    @abstractmethod
    def commit(self, record: dict[str, Any]) -> None:
        """Commit a pre-committed transaction: its rows become visible in the target at once.
        Called again after a failure between commit and the job's next step, so committing an
        already committed transaction must succeed without writing anything twice; a transaction
        the target no longer has and never committed raises ``TransactionLostError``."""

    def recover_and_commit(self, record: dict[str, Any]) -> None:
        """Commit a transaction recorded in the checkpoint a failed run completed last."""
        self.commit(record)

    @abstractmethod
    def lingering(self, job_id: str, operator_id: str) -> list[dict[str, Any]]:
        """Records of the pre-committed or staged transactions the target still holds for the
        job's operator (their ids start with ``transaction_prefix``) that were neither committed
        nor aborted."""

    @abstractmethod
    def recover_and_abort(self, record: dict[str, Any]) -> None:
        """Abort a lingering transaction (one ``lingering`` returned); it may be gone already."""


class WriteAheadSink(Sink):
    """A target without transactions: the coordinator publishes each subtask's logged output once
    the checkpoint is complete, and again after a failure (so ``publish`` is idempotent)."""

    kind = "write-ahead"

    @abstractmethod
    def publish(self, context: SinkContext, batches: Iterable[pa.RecordBatch]) -> None:
        """Write the rows of ``context``'s subtask and epoch to the target, unless an earlier call
        for the same ``context.publication_key`` did; atomically, so that a crash never leaves part
        of them."""

