"""Executor-local working directories of disk-backed backends, each used by one process only.

A keyed backend keeps its files in its own *instance directory* (``instance_path``), and holds
an exclusive ``flock`` on ``statekit.lock`` inside it while open (``acquire_lock``): stores such as
LMDB or SQLite let several processes open one database, but a subtask's working state must be
used by exactly one worker, so a second opener gets a clear error instead.

Without a configured directory, working state goes to ``default_local_dir()``: a directory of this
user's own in the temp directory (``<tmp>/statekit-<uid>``, mode 0700), as tmux and ssh-agent keep
theirs, since the temp directory is shared by every user of the machine.
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
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
    ``local_dir`` defaults to ``default_local_dir()``."""
    base = local_dir or default_local_dir()
    return os.path.join(base, safe_name(subtask.job_id), safe_name(subtask.operator_id),
                        f"{subtask.subtask_index}-{instance_id[:12]}")


def default_local_dir() -> str:
    """``<temp dir>/statekit-<uid>``, this user's directory of working state when no local
    directory is configured: created with mode 0700, and refused when it is another user's or
    others may write or read in it (anyone can create a name in the temp directory first)."""
    path = os.path.join(tempfile.gettempdir(), f"statekit-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    problem = ("is not a directory" if not stat.S_ISDIR(info.st_mode) else
               f"belongs to user id {info.st_uid}, not to this user ({os.getuid()})" if info.st_uid != os.getuid() else
               f"is open to other users (mode {stat.S_IMODE(info.st_mode):o})" if info.st_mode & 0o077 else None)
    if problem is not None:
        raise StatekitError(f"the default directory of working state {path} {problem}; statekit keeps state there "
                            f"only in a directory of this user's own with mode 700. Remove it, or set "
                            f"spark.statekit.local.dir to a local directory of your own")
    return path


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
    try:  # the directory may have been removed (``remove_locked``) between the open and the lock
        removed = os.stat(path).st_ino != os.fstat(fd).st_ino
    except FileNotFoundError:
        removed = True
    if removed:
        release_lock(fd)
        raise LockBusyError(f"{what} in {directory} was removed while it was being locked")
    os.ftruncate(fd, 0)  # also marks the time of its last use (``last_used``)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def remove_locked(directory: str) -> bool:
    """Remove ``directory`` (one with a ``LOCK_FILE``) unless a backend or process holds its lock:
    it is removed while locked, and whoever opened its lock file meanwhile finds it removed
    (``acquire_lock``). Returns whether it was removed."""
    try:
        fd = acquire_lock(directory, "the directory")
    except (LockBusyError, FileNotFoundError):
        return False
    try:
        shutil.rmtree(directory, ignore_errors=True)
    finally:
        release_lock(fd)
    return True


def last_used(directory: str) -> float:
    """When ``directory`` was last used (seconds since the epoch): the latest change of it, its lock
    file and the files directly in it."""
    latest = os.stat(directory).st_mtime
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
            except FileNotFoundError:
                pass
    return latest


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
