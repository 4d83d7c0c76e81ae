"""Job ownership: one run writes a job's checkpoints at a time, and a job's state is continued
only by the query or kind of job that wrote it.

* **Fencing.** Every run (a streaming query's start, a bounded ``process_keyed`` call, a local
  runner) gets a fresh run id, its fencing token. When it starts it writes the job's owner record
  (``CheckpointStorageAccess.write_owner``); before every commit, and before removing what an
  aborted epoch wrote, it reads the record back. If another run has written it since, this run
  was fenced: it fails with ``JobOwnershipError`` and writes or removes nothing more. The newest
  run wins, so a restart after a crash simply takes over, while the older of two concurrent runs
  stops at its next commit instead of interleaving its checkpoints with the other's.
* **What was committed.** The owner record also keeps the id of the latest checkpoint a run of the
  job committed, rewritten after every commit. A run that finds an older latest checkpoint than
  that (its ``_metadata`` was deleted) would silently roll the job back, so it is refused unless
  the snapshot to continue from is given explicitly (``CheckpointStore.lost_commit``).
* **Identity.** Every checkpoint records the identity of the run that committed it (the
  ``owner`` property): a streaming query (Spark's query id) or bounded runs. A run whose identity
  differs from the one recorded in the job's latest checkpoint is refused when it starts, unless
  it is told to take the job over.
"""
from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.spi.errors import CorruptStateError, JobOwnershipError
from statekit.spi.storage import CheckpointStorageAccess

if TYPE_CHECKING:
    from statekit.checkpoint.store import CompletedCheckpoint

#: the checkpoint properties of the committing run: its identity and its run id
OWNER_PROPERTY = "owner"
RUN_PROPERTY = "run_id"
TAKE_OVER_SETTING = "spark.statekit.job.take-over"


@dataclass(frozen=True)
class RunIdentity:
    """Whose state a job's checkpoints are: ``kind`` and ``id`` compare, ``description`` explains."""

    kind: str
    id: str | None
    description: str

    def same_as(self, other: "RunIdentity") -> bool:
        return (self.kind, self.id) == (other.kind, other.id)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "description": self.description}

    @classmethod
    def from_json(cls, data: Any) -> "RunIdentity | None":
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            return None
        return cls(data["kind"], data.get("id"), str(data.get("description") or data["kind"]))


#: every bounded run (``process_keyed``, the local runner) continues the job's latest checkpoint
BOUNDED = RunIdentity("bounded", None, "bounded runs (process_keyed or the local runner)")


def streaming_query(query_id: str, checkpoint_location: str) -> RunIdentity:
    return RunIdentity("streaming-query", query_id,
                       f"streaming query {query_id} (checkpointLocation {checkpoint_location})")


def recorded_identity(checkpoint: "CompletedCheckpoint") -> RunIdentity | None:
    """The identity of the run that committed ``checkpoint`` (None before identities were recorded)."""
    return RunIdentity.from_json(checkpoint.metadata.properties.get(OWNER_PROPERTY))


def check_identity(job_id: str, identity: RunIdentity, latest: "CompletedCheckpoint | None",
                   take_over: bool = False) -> None:
    """Refuse to continue job ``job_id`` as ``identity`` when its latest checkpoint was written by
    another query or kind of job, unless ``take_over``."""
    recorded = recorded_identity(latest) if latest is not None else None
    if recorded is None or recorded.same_as(identity) or take_over:
        return
    pointer = latest.pointer.external_pointer  # type: ignore[union-attr]
    raise JobOwnershipError(
        f"job {job_id!r} belongs to {recorded.description}: its latest checkpoint {pointer} was written by it, and "
        f"this run is {identity.description}. Two queries or jobs must not share a job id: give this one its own "
        f"(job_id= or spark.statekit.job-id), with spark.statekit.restore.path={pointer} to start from that state; "
        f"or set {TAKE_OVER_SETTING}=true to continue the job with this run (the other then cannot)")


@dataclass(frozen=True)
class OwnerRecord:
    """The run that owns a job now."""

    run_id: str
    identity: RunIdentity
    started: float
    host: str
    pid: int
    #: the latest checkpoint id a run of the job committed (None: none, or a record written before)
    committed: int | None = None

    @classmethod
    def new(cls, identity: RunIdentity) -> "OwnerRecord":
        return cls(uuid.uuid4().hex, identity, time.time(), socket.gethostname(), os.getpid())

    def to_bytes(self) -> bytes:
        return json.dumps({"run_id": self.run_id, "identity": self.identity.to_json(), "started": self.started,
                           "host": self.host, "pid": self.pid, "committed": self.committed}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, source: str) -> "OwnerRecord":
        try:
            doc = json.loads(data)
            identity = RunIdentity.from_json(doc["identity"])
            if identity is None:
                raise ValueError("no identity")
            committed = doc.get("committed")
            if committed is not None and (not isinstance(committed, int) or isinstance(committed, bool)):
                raise ValueError(f"committed is {committed!r}, not a checkpoint id")
            return cls(str(doc["run_id"]), identity, float(doc["started"]), str(doc["host"]), int(doc["pid"]),
                       committed)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptStateError(f"the owner record of {source} is corrupt ({exc}); delete it: the next run "
                                    f"writes a new one") from exc

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        return f"run {self.run_id} of {self.identity.description}, started {started} on {self.host} (pid {self.pid})"


class JobOwnership:
    """One run's ownership of job ``job_id`` in ``access`` (see the module docstring)."""

    def __init__(self, access: CheckpointStorageAccess, job_id: str, identity: RunIdentity,
                 take_over: bool = False) -> None:
        self.access = access
        self.job_id = job_id
        self.run = OwnerRecord.new(identity)
        self.take_over = take_over
        self._acquired = False

    def begin_epoch(self, latest: "CompletedCheckpoint | None") -> None:
        """Take the job on this run's first epoch (after checking identities against ``latest``,
        the job's latest completed checkpoint); on later epochs, check this run still owns it."""
        if self._acquired:
            self.check()
            return
        check_identity(self.job_id, self.run.identity, latest, self.take_over)
        self.run = replace(self.run, committed=_later(self.last_commit(), latest.checkpoint_id if latest else None))
        self.access.write_owner(self.run.to_bytes())
        self._acquired = True

    def last_commit(self) -> int | None:
        """The latest checkpoint id a run of this job committed, as the owner record keeps it."""
        if self._acquired:
            return self.run.committed
        previous = self.owner()
        return previous.committed if previous is not None else None

    def record_commit(self, checkpoint_id: int) -> None:
        """Keep ``checkpoint_id`` in the owner record as the job's latest, after its commit, while
        this run owns the job. The latest, not the highest: a commit disposes of every checkpoint
        from its id on (a replay), and a run that continued from older state on purpose commits
        lower ids than the ones it gave up."""
        if checkpoint_id != self.run.committed and self.holds():
            self.run = replace(self.run, committed=checkpoint_id)
            self.access.write_owner(self.run.to_bytes())

    def owner(self) -> OwnerRecord | None:
        data = self.access.read_owner()
        return None if data is None else OwnerRecord.from_bytes(data, f"job {self.job_id!r}")

    def holds(self) -> bool:
        """True while this run's record is the job's owner record."""
        current = self.owner()
        return self._acquired and current is not None and current.run_id == self.run.run_id

    def check(self) -> None:
        """Raise ``JobOwnershipError`` unless this run still owns the job."""
        if not self._acquired:
            raise JobOwnershipError(f"{self.run.describe()} commits to job {self.job_id!r} without having taken it "
                                    f"(begin_epoch was not called)")
        current = self.owner()
        if current is None or current.run_id != self.run.run_id:
            taken = current.describe() if current is not None else "a run that removed the owner record"
            raise JobOwnershipError(
                f"job {self.job_id!r} was taken over by {taken}, while {self.run.describe()} was running: two runs "
                f"must not write one job's checkpoints. This run's epoch was not committed; stop one of the two "
                f"(or give one its own job id)")

    def stamp(self, metadata: CheckpointMetadata) -> CheckpointMetadata:
        """``metadata`` with this run's identity and run id recorded."""
        return replace(metadata, properties={**metadata.properties, OWNER_PROPERTY: self.run.identity.to_json(),
                                             RUN_PROPERTY: self.run.run_id})


def _later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
