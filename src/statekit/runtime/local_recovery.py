"""Local recovery: a subtask's next epoch reuses the working state its previous epoch left on
this machine, instead of restoring it from checkpoint storage, when that state is exactly the
restore point.

Spark runs each subtask in whichever Python worker is free, forks workers from a daemon, reuses
them and kills them when idle. So working state is found by a *slot* on executor-local disk,
named by (job, operator, subtask index, parallelism, max parallelism), not by process, and by
where the job's checkpoints are (``job_scope``): two jobs of one id that checkpoint elsewhere (two
queries, or runs with two checkpoint directories) never share a slot:

* ``<slot>/state`` is the backend's working directory. An exclusive ``flock`` on the slot's lock
  file guards it, so no two processes ever open the same RocksDB or LMDB files; a process that
  finds the slot busy works in a private directory and restores from storage.
* ``<slot>/reflects.json`` names the snapshot the working state equals: the checkpoint id and a
  digest of the subtask's handles in it. It is removed before the state is touched and written
  again only after the epoch's snapshot was uploaded, so a task that fails half-way leaves no
  claim. The state is reused only when the restore point's handles for this subtask have the
  same digest, which also rules out state of an earlier job that reused the job id.

Slots are removed when nothing needs them any more, never while a process holds their lock:

* the slots of another layout (parallelism, max parallelism) of the job's operator and backend, by
  each subtask whose restore point has its own layout: after a rescale, the first epoch at the new
  parallelism completed, and no restore point can match the old slots again;
* any slot, private directory or backend instance directory under the local root that no process
  used for ``retention_seconds`` (``spark.statekit.local.retention``): a job that ended, or was
  renamed, leaves its working state for that long. The sweep runs in a lease at most once per
  ``SWEEP_INTERVAL_SECONDS`` per local root (a marker file's time).

Backends that declare ``local_recovery`` close their files after each epoch and reopen them in
whichever process runs the subtask next. Other backends (the heap) cannot leave their state on
disk; their open keyed backend stays in the worker's memory, and is reused when the same worker
runs the subtask again. Either way a miss costs only a restore from storage. Operator state (small)
is always restored from storage, since union list state is redistributed on every restore.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

import xxhash

from statekit.backends.common.local_dirs import (
    LOCK_FILE, LockBusyError, acquire_lock, last_used, release_lock, remove_locked, safe_name,
)
from statekit.checkpoint.metadata import SubtaskState
from statekit.spi.backend import KeyedStateBackend, OperatorStateBackend, SubtaskInfo

REFLECTS_FILE = "reflects.json"
STATE_DIR = "state"
#: how long an unused slot stays by default (``spark.statekit.local.retention``)
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
#: the longest time between two sweeps of a local root for unused slots
SWEEP_INTERVAL_SECONDS = 3600
SWEEP_MARKER = ".statekit-swept"
#: identifies this Python worker process in the slots it leaves state in (pids are reused)
PROCESS_TOKEN = uuid.uuid4().hex


@dataclass
class ParkedBackend:
    """A keyed backend kept open in this process between epochs (backends without on-disk
    recovery). Operator state is not kept: its restore redistributes union state every time."""

    keyed: KeyedStateBackend
    digest: str


#: slot directory -> the keyed backend this process parked
_PARKED: dict[str, ParkedBackend] = {}


def subtask_state_digest(state: SubtaskState) -> str:
    return xxhash.xxh3_64_hexdigest(json.dumps(state.to_json(), sort_keys=True).encode())


class SlotLease:
    """This process's use of one subtask's slot for one epoch."""

    def __init__(self, directory: str, lock_fd: int | None, reusable: bool,
                 parked: ParkedBackend | None, private: bool = False) -> None:
        self.directory = directory
        self._lock_fd = lock_fd
        #: a private directory (the slot was busy) is deleted when the lease ends
        self._private = private
        #: the working directory holds exactly the restore point (reopen it, do not restore)
        self.reusable = reusable
        #: this process's open keyed backend holding exactly the restore point
        self.parked = parked

    @property
    def working_dir(self) -> str:
        return os.path.join(self.directory, STATE_DIR)

    @property
    def exclusive(self) -> bool:
        """False when another process held the slot: the lease works in a private directory."""
        return not self._private

    def publish(self, checkpoint_id: int, state: SubtaskState, keyed: KeyedStateBackend,
                operator: OperatorStateBackend, on_disk: bool) -> None:
        """The working state now equals ``state``, the snapshot just uploaded for ``checkpoint_id``.
        ``on_disk`` keyed backends are closed (their files stay); others are parked in this process."""
        try:
            digest = subtask_state_digest(state)
            park = not on_disk and self.exclusive
            try:
                operator.dispose()
            finally:
                if park:
                    _PARKED[self.directory] = ParkedBackend(keyed, digest)
                else:
                    keyed.dispose()
            if self.exclusive:
                _write_reflects(self.directory, {"checkpoint_id": checkpoint_id, "digest": digest,
                                                 "process": PROCESS_TOKEN if park else None})
        finally:
            self.release()

    def release(self) -> None:
        """End the lease; a private (non-exclusive) directory is deleted."""
        fd, self._lock_fd = self._lock_fd, None
        if self._private:
            shutil.rmtree(self.directory, ignore_errors=True)
        if fd is not None:
            release_lock(fd)


def job_scope(storage: str, checkpoint_dir: str | None, storage_options: Mapping[str, Any], durable: bool) -> str:
    """Where a job's checkpoints are, as a short digest that names its slots (``lease_slot``): the
    storage, its directory and options, and for a storage that keeps checkpoints in driver memory,
    the driver process (computed on the driver). Without it, two jobs of one id running on one
    machine (say two queries, each checkpointing to its own directory) shared their slots: each
    found the other's state there and restored from storage every epoch, and a rescale of one
    removed the other's slots."""
    where = [storage, checkpoint_dir, sorted((str(k), str(v)) for k, v in storage_options.items()),
             None if durable else PROCESS_TOKEN]
    return hashlib.sha256(json.dumps(where).encode()).hexdigest()[:12]


def lease_slot(local_root: str, backend_name: str, subtask: SubtaskInfo, restore: SubtaskState | None,
               retention_seconds: float = DEFAULT_RETENTION_SECONDS, scope: str = "") -> SlotLease:
    """Take the subtask's slot for an epoch of backend ``backend_name`` restoring ``restore``
    (None: fresh state; else the subtask's own state in a restore point of this layout). Each
    backend has slots of its own: after a switch of backends the working state of the other one
    is never reopened; so has each ``scope`` (``job_scope``) of the job.

    Drops whatever this process parked for slots that now reflect another process's state, removes
    the slots nothing needs any more (see the module), and claims the slot: after this call the
    slot makes no claim until ``publish``."""
    sweep_unused(local_root, retention_seconds)
    parent = os.path.join(local_root, safe_name(subtask.job_id), safe_name(subtask.operator_id))
    name = slot_name(backend_name, subtask.subtask_index, subtask.parallelism, subtask.max_parallelism, scope)
    directory = os.path.join(parent, name)
    if restore is not None:
        _remove_other_layouts(parent, backend_name, name, scope)
    _drop_stale_parked()
    while True:
        os.makedirs(directory, exist_ok=True)
        try:
            fd = acquire_lock(directory, "the subtask's working state")
            break
        except FileNotFoundError:  # removed by a sweep between the two calls: create it again
            continue
        except LockBusyError:  # another worker uses the slot right now (e.g. a speculative attempt)
            private = os.path.join(parent, f"private-{uuid.uuid4().hex[:12]}")
            os.makedirs(os.path.join(private, STATE_DIR))
            return SlotLease(private, acquire_lock(private, "a private working directory"), False, None, private=True)
    reflects = _read_reflects(directory)
    wanted = subtask_state_digest(restore) if restore is not None else None
    matches = reflects is not None and wanted is not None and reflects.get("digest") == wanted
    parked = _PARKED.pop(directory, None)
    if parked is not None and not (matches and reflects.get("process") == PROCESS_TOKEN
                                   and parked.digest == wanted):
        parked.keyed.dispose()
        parked = None
    reusable = matches and reflects.get("process") is None
    _remove_reflects(directory)
    if not reusable:
        shutil.rmtree(os.path.join(directory, STATE_DIR), ignore_errors=True)
    os.makedirs(os.path.join(directory, STATE_DIR), exist_ok=True)
    return SlotLease(directory, fd, reusable, parked)


def slot_name(backend_name: str, subtask_index: int, parallelism: int, max_parallelism: int, scope: str = "") -> str:
    return f"{_slot_prefix(backend_name, scope)}-subtask-{subtask_index}-of-{parallelism}-max-{max_parallelism}"


def _slot_prefix(backend_name: str, scope: str) -> str:
    return f"{safe_name(backend_name)}-{safe_name(scope)}" if scope else safe_name(backend_name)


def _remove_other_layouts(parent: str, backend_name: str, name: str, scope: str = "") -> None:
    """Remove the slots of ``backend_name`` and ``scope`` in ``parent`` (the job's operator) of another
    layout than slot ``name``'s: their state reflects checkpoints older than the restore point. The
    slots of another scope are another job's (of the same id), left alone."""
    pattern = re.compile(re.escape(_slot_prefix(backend_name, scope)) + r"-subtask-\d+-of-(\d+)-max-(\d+)")
    layout = pattern.fullmatch(name)
    assert layout is not None
    try:
        entries = os.listdir(parent)
    except FileNotFoundError:
        return
    for entry in entries:
        other = pattern.fullmatch(entry)
        if other is not None and other.groups() != layout.groups():
            remove_locked(os.path.join(parent, entry))


def sweep_unused(local_root: str, retention_seconds: float, now: float | None = None) -> list[str]:
    """Remove what no process used for ``retention_seconds`` in ``local_root``: slots, private
    directories and backend instance directories (``<root>/<job>/<operator>/<entry>`` holding a
    lock file), then the job and operator directories left empty. Runs only when the root was not
    swept in the last ``min(retention_seconds, SWEEP_INTERVAL_SECONDS)``; returns what it removed."""
    now = time.time() if now is None else now
    marker = os.path.join(local_root, SWEEP_MARKER)
    try:
        if now - os.stat(marker).st_mtime < min(retention_seconds, SWEEP_INTERVAL_SECONDS):
            return []
    except FileNotFoundError:
        pass
    os.makedirs(local_root, exist_ok=True)
    with open(marker, "a"):
        pass
    os.utime(marker, (now, now))
    removed = []
    for job in _directories(local_root):
        for operator in _directories(job):
            for entry in _directories(operator):
                try:
                    idle = now - last_used(entry) >= retention_seconds
                except FileNotFoundError:
                    continue
                if idle and os.path.exists(os.path.join(entry, LOCK_FILE)) and remove_locked(entry):
                    removed.append(entry)
            _remove_if_empty(operator)
        _remove_if_empty(job)
    return removed


def _directories(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _remove_if_empty(directory: str) -> None:
    try:
        os.rmdir(directory)
    except OSError:  # not empty, or gone
        pass


def _drop_stale_parked() -> None:
    for directory, parked in list(_PARKED.items()):
        reflects = _read_reflects(directory)
        if reflects is None or reflects.get("process") != PROCESS_TOKEN or reflects.get("digest") != parked.digest:
            del _PARKED[directory]
            parked.keyed.dispose()


def _read_reflects(directory: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(directory, REFLECTS_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_reflects(directory: str, content: dict[str, Any]) -> None:
    temporary = os.path.join(directory, f".{REFLECTS_FILE}.{uuid.uuid4().hex[:8]}")
    with open(temporary, "w") as f:
        json.dump(content, f)
    os.replace(temporary, os.path.join(directory, REFLECTS_FILE))


def _remove_reflects(directory: str) -> None:
    try:
        os.remove(os.path.join(directory, REFLECTS_FILE))
    except FileNotFoundError:
        pass
