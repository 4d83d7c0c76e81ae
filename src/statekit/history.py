"""A job's checkpoint history: what ``statekit checkpoints history`` prints and plots.

The rows come from the job's latest completed checkpoint: its ``metrics`` property carries its
own figures and summaries of up to ``runtime.metrics.HISTORY_LENGTH`` epochs before it, along the
job's lineage, so the history reaches further back than checkpoint retention keeps checkpoints.
Checkpoints written without metrics (metrics off, or an older statekit) show their retained
checkpoints with the figures the metadata has (time, state size, full or incremental).
``state_size`` is the checkpoint's size in storage; ``state_entries``, ``live_state_bytes`` and
``timers_pending`` are the backends' own figures (``KeyedStateBackend.state_sizes``), None where
the backend does not say or the epoch was recorded before they were.
"""
from __future__ import annotations

from typing import Any

from statekit.checkpoint.metadata import read_metadata
from statekit.inspection import InspectionError, iso_time, list_checkpoints, resolve_checkpoint
from statekit.runtime.metrics import METRICS_PROPERTY, EpochMetrics

#: the columns of a history row (``checkpoints history --json``)
COLUMNS = ("checkpoint_id", "time", "duration_ms", "bytes_written", "bytes_written_full", "bytes_written_incremental",
           "bytes_reused", "state_size", "kind", "parallelism", "restore_sources", "rows_in", "rows_out",
           "state_entries", "state_entries_exact", "live_state_bytes", "timers_pending")


def checkpoint_history(url: str, job_id: str | None = None, last: int = 20,
                       storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The document ``checkpoints history --json`` prints: the last ``last`` checkpoints of the
    job ``job_id`` under ``url`` (a checkpoint directory, or a job directory), oldest first."""
    if last < 1:
        raise InspectionError(f"--last must be at least 1, got {last}")
    jobs = list_checkpoints(url, storage_options)["jobs"]
    if job_id is None and len(jobs) == 1:
        job = jobs[0]
    else:
        found = [j for j in jobs if j["job_id"] == job_id]
        if not found:
            names = sorted(j["job_id"] for j in jobs)
            raise InspectionError(f"{url!r} holds the jobs {names}: name one with --job" if job_id is None else
                                  f"{url!r} has no job {job_id!r}; it holds {names}")
        job = found[0]
    completed = [c for c in job["checkpoints"] if c["status"] == "completed"]
    if not completed:
        raise InspectionError(f"job {job['job_id']!r} at {job['path']} has no completed checkpoint")
    resolved = resolve_checkpoint(completed[-1]["path"], storage_options, "path")
    metadata = read_metadata(resolved.metadata, resolved.pointer)
    recorded = EpochMetrics.from_properties(metadata.job_id, "", metadata.checkpoint_id, metadata.properties) \
        if isinstance(metadata.properties.get(METRICS_PROPERTY), dict) else None
    if recorded is None:
        rows = [_row_without_metrics(c) for c in completed]
    else:
        rows = [_row(entry) for entry in [*recorded.history, recorded.summary()]]
    return {"path": job["path"], "job_id": job["job_id"], "checkpoints": rows[-last:]}


def _row(entry: dict[str, Any]) -> dict[str, Any]:
    full, incremental = entry.get("bytes_written_full"), entry.get("bytes_written_incremental")
    timestamp = entry.get("timestamp")
    return {"checkpoint_id": entry.get("checkpoint_id"),
            "time": iso_time(timestamp) if isinstance(timestamp, (int, float)) else None,
            "duration_ms": entry.get("duration_ms"),
            "bytes_written": None if full is None or incremental is None else full + incremental,
            "bytes_written_full": full, "bytes_written_incremental": incremental,
            "bytes_reused": entry.get("bytes_reused"), "state_size": entry.get("state_bytes"),
            "kind": entry.get("kind"), "parallelism": entry.get("parallelism"),
            "restore_sources": entry.get("restore_sources"), "rows_in": entry.get("rows_in"),
            "rows_out": entry.get("rows_out"), "state_entries": entry.get("state_entries"),
            "state_entries_exact": entry.get("state_entries_exact"), "live_state_bytes": entry.get("live_state_bytes"),
            "timers_pending": entry.get("timers_pending")}


def _row_without_metrics(entry: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(checkpoint_id=entry["checkpoint_id"], time=entry["time"], state_size=entry["state_size"],
               kind="incremental" if entry["incremental"] else "full")
    return row
