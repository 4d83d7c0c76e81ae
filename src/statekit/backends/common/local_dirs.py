"""Executor-local working directories of disk-backed backends, each used by one process only.

A keyed backend keeps its files in its own *instance directory* (``instance_path``), and holds
an exclusive ``flock`` on ``statekit.lock`` inside it while open (``acquire_lock``): stores such as
LMDB or SQLite let several processes open one database, but a subtask's working state must be
used by exactly one worker, so a second opener gets a clear error instead.
"""
from __future__ import annotations

import errno
import fcntl
import os
import tempfile

from statekit.spi.backend import SubtaskInfo
from statekit.spi.errors import StatekitError, WorkingStateError
from statekit.spi.options import Option, local_directory

LOCK_FILE = "statekit.lock"
#: the backend option of disk-backed backends; ``spark.statekit.local.dir`` sets it for all
LOCAL_DIR_OPTION = Option("local-dir", local_directory, None,
                          "where the instance directories are created (default: the temp directory)")


class LockBusyError(StatekitError):
    """The directory's lock is held by another open backend or process."""


def instance_path(local_dir: str | None, backend_name: str, subtask: SubtaskInfo, instance_id: str) -> str:
    """``<local_dir>/<job>/<operator>/<subtask index>-<instance_id[:12]>`` (not created here);
    ``local_dir`` defaults to ``<temp dir>/statekit-<backend_name>``."""
    base = local_dir or os.path.join(tempfile.gettempdir(), f"statekit-{backend_name}")
    return os.path.join(base, safe_name(subtask.job_id), safe_name(subtask.operator_id),
                        f"{subtask.subtask_index}-{instance_id[:12]}")


def acquire_lock(directory: str, what: str) -> int:
    """Take the exclusive lock of ``directory`` (held until ``release_lock``); ``what`` names the
    locked store in errors, e.g. ``"the LMDB environment"``."""
    path = os.path.join(directory, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = ""
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        except OSError:
            pass
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LockBusyError(
                f"{what} in {directory} is already open (its {LOCK_FILE} is held"
                f"{' by process ' + holder if holder else ''}); a subtask's working state may be used by "
                f"one backend in one process only: dispose the other backend first") from None
        raise StatekitError(f"cannot lock {what} in {directory}: {exc}") from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def working_state_error(exc: BaseException, backend_name: str, directory: str,
                        action: str) -> WorkingStateError | None:
    """The statekit error of a failed write of a backend's working state in ``directory`` (a full
    or failing disk: RocksDB's ``IO error: No space left on device``, LMDB's ``Input/output error``,
    ``ENOSPC``), or None when ``exc`` is no disk error. For except clauses: costs nothing otherwise."""
    text = str(exc)
    errno_of = getattr(exc, "errno", None)
    full = errno_of == errno.ENOSPC or "No space left on device" in text
    if not (full or errno_of == errno.EIO or "IO error" in text or "Input/output error" in text):
        return None
    try:
        stat = os.statvfs(directory)
        free = f"{stat.f_bavail * stat.f_frsize} bytes free of {stat.f_blocks * stat.f_frsize}"
        full = full or stat.f_bavail * stat.f_frsize < 1 << 20  # LMDB reports a full disk as EIO
    except OSError:
        free = "free space unknown"
    return WorkingStateError(
        f"the {backend_name} backend cannot {action} in {directory}: {'the disk is full' if full else 'a write failed'} "
        f"({free}; {type(exc).__name__}: {' '.join(text.split())}). Its working state goes to spark.statekit.backend."
        f"{backend_name}.local-dir, or spark.statekit.local.dir for every backend (default: the system's temporary "
        f"directory): free space there, or point the setting at a local disk with room for the job's state")


def release_lock(fd: int) -> None:
    """Release and close a lock taken by ``acquire_lock``. In a forked child, close ``fd`` with
    ``os.close`` instead: unlocking would release the parent's lock too."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
