"""Per-epoch metrics of a keyed job, the same for the Spark engine and the local runner.

Each subtask fills a ``TaskMetrics`` (owned by its ``KeyedTask``): counted per call, per batch or
per snapshot, never per row. The coordinator combines them into ``EpochMetrics``, records them
with the epoch's checkpoint (property ``METRICS_PROPERTY``, versioned: readers ignore fields they
do not know) and ``publish``-es them: one INFO line on logger ``LOGGER_NAME`` and a call of
every listener.

Exact or estimated: every count is exact; ``keys_touched`` is exact where ``keys_exact`` says
so (a subtask whose input came in several batches counts a key once per batch it is in);
``state_bytes`` is the size of the subtask's snapshot in checkpoint storage (exact). The states'
sizes in the backend (``states``, from ``KeyedStateBackend.state_sizes``) say themselves whether
their entries are exact and how their bytes were estimated; None where the backend does not say.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterable, Mapping, Sequence

from statekit.checkpoint.metadata import SubtaskState
from statekit.runtime.timers import domain_of
from statekit.spi.backend import StateSize
from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import StateHandle

#: the checkpoint property holding an epoch's metrics
METRICS_PROPERTY = "metrics"
METRICS_VERSION = 1
#: where one line per committed epoch is logged, at INFO
LOGGER_NAME = "statekit.metrics"
#: summaries of earlier epochs each checkpoint carries (``EpochMetrics.history``)
HISTORY_LENGTH = 100
#: the fields of an epoch's summary in the history
HISTORY_FIELDS = ("timestamp", "duration_ms", "state_bytes", "bytes_written_full", "bytes_written_incremental",
                  "bytes_reused", "kind", "parallelism", "restore_sources", "rows_in", "rows_out", "state_entries",
                  "state_entries_exact", "live_state_bytes", "timers_pending")

_log = logging.getLogger(LOGGER_NAME)


@dataclass
class TaskMetrics:
    """One subtask's figures for one epoch (times in milliseconds)."""

    subtask: int = 0
    rows_in: int = 0
    rows_out: int = 0
    keys_touched: int = 0
    keys_exact: bool = True
    #: rows found late (dropped, set aside or processed, as the job's ``late_rows`` says)
    late_rows: int = 0
    timers_registered: int = 0
    timers_fired: int = 0
    ttl_removed: int = 0
    restore_source: str = "fresh"
    restore_ms: float = 0.0
    sync_snapshot_ms: float = 0.0
    async_snapshot_ms: float = 0.0
    state_bytes: int = 0
    bytes_written_full: int = 0
    bytes_written_incremental: int = 0
    bytes_reused: int = 0
    sink_pre_commit_ms: float | None = None
    #: per state, its ``StateSize`` as a dict (timer states included); None: the backend does not say
    states: dict[str, dict[str, Any]] | None = None
    #: timers registered and not fired yet (the entries of the timer states); None: unknown
    timers_pending: int | None = None

    def count_input(self, rows: int, keys: int) -> None:
        """A batch of ``rows`` rows of ``keys`` keys; a second batch makes ``keys_touched`` an upper bound."""
        if self.rows_in:
            self.keys_exact = False
        self.rows_in += rows
        self.keys_touched += keys

    def record_snapshot(self, state: SubtaskState, restored: Iterable[StateHandle], incremental: bool,
                        write_ms: float) -> None:
        """The written snapshot: its size, and its files by whether they are new or reused from the restore point."""
        known = {_stream_key(h) for handle in restored for h in handle.stream_handles()}
        handles = [*state.keyed, *([state.operator] if state.operator is not None else [])]
        self.state_bytes = state.state_size
        self.async_snapshot_ms = write_ms
        for stream in (s for handle in handles for s in handle.stream_handles()):
            if _stream_key(stream) in known:
                self.bytes_reused += stream.size
            elif incremental:
                self.bytes_written_incremental += stream.size
            else:
                self.bytes_written_full += stream.size

    def record_state_sizes(self, sizes: Mapping[str, StateSize] | None) -> None:
        """The backend's ``state_sizes`` after the snapshot: ``states``, and the timer states'
        entries as ``timers_pending``."""
        if sizes is None:
            return
        self.states = {name: asdict(size) for name, size in sorted(sizes.items())}
        self.timers_pending = sum(size.entries for name, size in sizes.items() if domain_of(name) is not None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TaskMetrics":
        """Tolerant: fields it does not know (a newer writer's) are ignored, missing ones default."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _stream_key(handle: Any) -> str:
    return handle.stored_as or handle.checksum


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()``), rounded to microseconds."""
    return round((time.perf_counter() - started) * 1000, 3)


#: summed over subtasks; the times' total is their maximum (the slowest subtask's)
_SUMMED = ("rows_in", "rows_out", "keys_touched", "late_rows", "timers_registered", "timers_fired", "ttl_removed",
           "state_bytes", "bytes_written_full", "bytes_written_incremental", "bytes_reused")
_SLOWEST = ("restore_ms", "sync_snapshot_ms", "async_snapshot_ms")


@dataclass
class EpochMetrics:
    """An epoch's metrics: per subtask and in total. ``sink_commit_ms`` is measured after the
    checkpoint is committed, so it is not recorded with it (listeners and the log line have it).
    ``history``: summaries of the epochs before it along the job's lineage (its restore point's
    history and the restore point itself), oldest first, at most ``HISTORY_LENGTH``: checkpoint
    retention keeps a few checkpoints, and the latest one still tells the job's recent past."""

    job_id: str
    operator_id: str
    checkpoint_id: int
    subtasks: list[TaskMetrics]
    total: dict[str, Any]
    version: int = METRICS_VERSION
    sink_commit_ms: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, job_id: str, operator_id: str, checkpoint_id: int, subtasks: Sequence[TaskMetrics],
           late_rows_policy: str | None, duration_ms: float) -> "EpochMetrics":
        """Combine the subtasks' figures; ``late_rows_policy``: the job's ``late_rows`` (None: no event time)."""
        total: dict[str, Any] = {name: sum(getattr(s, name) for s in subtasks) for name in _SUMMED}
        total.update({name: max((getattr(s, name) for s in subtasks), default=0.0) for name in _SLOWEST})
        total["keys_exact"] = all(s.keys_exact for s in subtasks)
        sink = [s.sink_pre_commit_ms for s in subtasks if s.sink_pre_commit_ms is not None]
        total["sink_pre_commit_ms"] = max(sink) if sink else None
        late = total["late_rows"]
        total["late_rows_dropped"] = late if late_rows_policy == "drop" else 0
        total["late_rows_side_output"] = late if late_rows_policy == "side_output" else 0
        sources: dict[str, int] = {}
        for s in subtasks:
            sources[s.restore_source] = sources.get(s.restore_source, 0) + 1
        total["restore_sources"] = sources
        total["parallelism"] = len(subtasks)
        total["duration_ms"] = duration_ms
        total["timestamp"] = time.time()
        total["kind"] = "incremental" if total["bytes_written_incremental"] or total["bytes_reused"] else "full"
        total.update(_summed_states(subtasks))
        return cls(job_id, operator_id, checkpoint_id, list(subtasks), total)

    def continue_history(self, restored: Mapping[str, Any] | None) -> None:
        """Take the history on from the properties of the checkpoint the epoch restored (None: a fresh start)."""
        before = EpochMetrics.from_properties(self.job_id, self.operator_id, -1, restored or {})
        if before is not None:
            self.history = [*before.history, before.summary()][-HISTORY_LENGTH:]

    def summary(self) -> dict[str, Any]:
        """The epoch's entry in later epochs' history."""
        return {"checkpoint_id": self.checkpoint_id, **{name: self.total.get(name) for name in HISTORY_FIELDS}}

    def to_property(self) -> dict[str, Any]:
        """The checkpoint property (``METRICS_PROPERTY``)."""
        return {"version": self.version, "checkpoint_id": self.checkpoint_id, "total": self.total,
                "subtasks": [s.to_json() for s in self.subtasks], "history": self.history}

    @classmethod
    def from_properties(cls, job_id: str, operator_id: str, checkpoint_id: int,
                        properties: Mapping[str, Any]) -> "EpochMetrics | None":
        """The metrics a checkpoint recorded; None where it has none (metrics off, or an older writer)."""
        recorded = properties.get(METRICS_PROPERTY)
        if not isinstance(recorded, Mapping):
            return None
        subtasks = [TaskMetrics.from_json(s) for s in recorded.get("subtasks", ()) if isinstance(s, Mapping)]
        history = [dict(e) for e in recorded.get("history", ()) if isinstance(e, Mapping)]
        return cls(job_id, operator_id, int(recorded.get("checkpoint_id", checkpoint_id)), subtasks,
                   dict(recorded.get("total", {})), int(recorded.get("version", METRICS_VERSION)), history=history)

    def flat(self) -> dict[str, Any]:
        """The totals with the epoch's identity and ``sink_commit_ms``: one record (the log line's)."""
        return {"job_id": self.job_id, "operator_id": self.operator_id, "checkpoint_id": self.checkpoint_id,
                "metrics_version": self.version, **self.total, "sink_commit_ms": self.sink_commit_ms}


def _summed_states(subtasks: Sequence[TaskMetrics]) -> dict[str, Any]:
    """``states`` summed over the subtasks (a state's entries are exact where every subtask's are, its
    bytes' basis is theirs), and the totals of the states other than timers: ``state_entries``
    (``state_entries_exact``) and ``live_state_bytes``; ``timers_pending``. All None unless every
    subtask's backend said."""
    if not subtasks or any(s.states is None for s in subtasks):
        return dict.fromkeys(("states", "state_entries", "state_entries_exact", "live_state_bytes", "timers_pending"))
    states: dict[str, dict[str, Any]] = {}
    for subtask in subtasks:
        for name, size in (subtask.states or {}).items():
            summed = states.setdefault(name, {"entries": 0, "bytes": 0, "entries_exact": True, "bytes_basis": ""})
            summed["entries"] += size["entries"]
            summed["bytes"] += size["bytes"]
            summed["entries_exact"] = summed["entries_exact"] and size["entries_exact"]
            bases = {*filter(None, summed["bytes_basis"].split(",")), size["bytes_basis"]}
            summed["bytes_basis"] = ",".join(sorted(bases))
    kept = [size for name, size in states.items() if domain_of(name) is None]
    return {"states": dict(sorted(states.items())), "state_entries": sum(size["entries"] for size in kept),
            "state_entries_exact": all(size["entries_exact"] for size in kept),
            "live_state_bytes": sum(size["bytes"] for size in kept),
            "timers_pending": sum(s.timers_pending or 0 for s in subtasks)}


#: a listener gets each committed epoch's metrics
MetricsListener = Callable[[EpochMetrics], None]
_listeners: list[MetricsListener] = []


def check_listener(listener: Any) -> MetricsListener:
    """``listener``, or a ``ConfigurationError`` unless it is a function of ``EpochMetrics``."""
    if not callable(listener):
        raise ConfigurationError(f"a metrics listener is a function of EpochMetrics, got {listener!r}")
    return listener


def add_listener(listener: MetricsListener) -> None:
    """Call ``listener(metrics)`` after every epoch this process coordinates commits (every job)."""
    _listeners.append(check_listener(listener))


def remove_listener(listener: MetricsListener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def publish(metrics: EpochMetrics, listeners: Sequence[MetricsListener] = ()) -> None:
    """Log the epoch's line and call the job's ``listeners`` and the registered ones; a failing
    listener is logged (WARNING), never fails the committed epoch."""
    if _log.isEnabledFor(logging.INFO):
        _log.info("%s", json.dumps(metrics.flat(), sort_keys=True, default=str))
    for listener in [*listeners, *_listeners]:
        try:
            listener(metrics)
        except Exception:  # noqa: BLE001 - the checkpoint is committed; a listener's failure is reported only
            _log.warning("metrics listener %r failed on checkpoint %d of job %r", listener, metrics.checkpoint_id,
                         metrics.job_id, exc_info=True)
