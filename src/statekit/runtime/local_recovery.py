"""Local recovery: a subtask's next epoch reuses the working state its previous epoch left on
this machine, instead of restoring it from checkpoint storage, when that state is exactly the
restore point.

Spark runs each subtask in whichever Python worker is free, forks workers from a daemon, reuses
them and kills them when idle. So working state is found by a *slot* on executor-local disk,
named by (job, operator, subtask index, parallelism, max parallelism), not by process:

* ``<slot>/state`` is the backend's working directory. An exclusive ``flock`` on the slot's lock
  file guards it, so no two processes ever open the same RocksDB or LMDB files; a process that
  finds the slot busy works in a private directory and restores from storage.
* ``<slot>/reflects.json`` names the snapshot the working state equals: the checkpoint id and a
  digest of the subtask's handles in it. It is removed before the state is touched and written
  again only after the epoch's snapshot was uploaded, so a task that fails half-way leaves no
  claim. The state is reused only when the restore point's handles for this subtask have the
  same digest, which also rules out state of an earlier job that reused the job id.

Backends that declare ``local_recovery`` close their files after each epoch and reopen them in
whichever process runs the subtask next. Other backends (the heap) cannot leave their state on
disk; their open keyed backend stays in the worker's memory, and is reused when the same worker
runs the subtask again. Either way a miss costs only a restore from storage. Operator state (small)
is always restored from storage, since union list state is redistributed on every restore.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Any

import xxhash

from statekit.backends.common.local_dirs import LockBusyError, acquire_lock, release_lock, safe_name
from statekit.checkpoint.metadata import SubtaskState
from statekit.spi.backend import KeyedStateBackend, OperatorStateBackend, SubtaskInfo

REFLECTS_FILE = "reflects.json"
STATE_DIR = "state"
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
                 parked: ParkedBackend | None) -> None:
        self.directory = directory
        self._lock_fd = lock_fd
        #: a private directory (the slot was busy) is deleted when the lease ends
        self._private = lock_fd is None
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
        if fd is not None:
            release_lock(fd)
        elif self._private:
            shutil.rmtree(self.directory, ignore_errors=True)


def lease_slot(local_root: str, backend_name: str, subtask: SubtaskInfo, restore: SubtaskState | None) -> SlotLease:
    """Take the subtask's slot for an epoch of backend ``backend_name`` restoring ``restore``
    (None: fresh state). Each backend has slots of its own: after a switch of backends the
    working state of the other one is never reopened.

    Drops whatever this process parked for slots that now reflect another process's state, and
    claims the slot: after this call the slot makes no claim until ``publish``."""
    _drop_stale_parked()
    parent = os.path.join(local_root, safe_name(subtask.job_id), safe_name(subtask.operator_id))
    directory = os.path.join(parent, f"{safe_name(backend_name)}-subtask-{subtask.subtask_index}-of-"
                                     f"{subtask.parallelism}-max-{subtask.max_parallelism}")
    os.makedirs(directory, exist_ok=True)
    try:
        fd = acquire_lock(directory, "the subtask's working state")
    except LockBusyError:  # another worker uses the slot right now (e.g. a speculative attempt)
        private = os.path.join(parent, f"private-{uuid.uuid4().hex[:12]}")
        os.makedirs(os.path.join(private, STATE_DIR))
        return SlotLease(private, None, False, None)
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
