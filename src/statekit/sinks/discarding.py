"""``DiscardingSink``: output dropped where it is computed (Flink's ``DiscardingSink``, Spark's
``noop`` format)."""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from statekit.spi.sinks import DISCARDING_KIND, SinkContext, TwoPhaseCommitSink


class DiscardingSink(TwoPhaseCommitSink[None]):
    """Drops every output row in the Spark stage that computes it. For jobs whose state is their
    product (state built to be read or queried, a bootstrap run) and for measuring a job apart
    from its output: a sink function would get the output kept for it (a local checkpoint of the
    stage) and run its own Spark job over it. The job checkpoints as with any sink, and the
    checkpoint records how many rows each subtask dropped.

    Its own ``kind``: a job restored from its checkpoints by a job with another sink finds no
    output to commit there, and a job that switches to it from another sink is stopped until the
    output that sink's latest checkpoint records is committed, as for any switch of sink kind."""

    kind = DISCARDING_KIND

    def begin_transaction(self, context: SinkContext) -> None:
        return None

    def write(self, transaction: None, batch: pa.RecordBatch) -> None:
        """The rows are dropped."""

    def pre_commit(self, transaction: None) -> dict[str, Any]:
        return {}

    def abort(self, transaction: None) -> None:
        """Nothing was written."""

    def commit(self, record: dict[str, Any]) -> None:
        """Nothing to publish."""

    def lingering(self, job_id: str, operator_id: str) -> list[dict[str, Any]]:
        return []

    def recover_and_abort(self, record: dict[str, Any]) -> None:
        """Nothing lingers."""
