"""What a storage leaves on this machine's disk: the storage level's durability tests.

``DiskRecorder`` watches, in this process, the files a storage creates or writes (through Python's
``open`` and ``os.open``), the directories it creates, its renames and links, and every ``fsync``:
at each ``fsync`` it remembers the bytes of the file, or the entries of the directory, as they were
then. ``problems()`` then names every file the storage wrote whose bytes, or whose name in its
directory, differ from what was last synced: what an OS crash or a power loss could lose.

``commit_killed_at`` runs a commit in a new Python process and kills it (``os._exit``, no cleanup
runs) at one point: just after a file is opened for writing (created or truncated, nothing written
yet), or just before a rename or a link. ``crash_points`` counts those points of a commit, so that a
test can kill a commit at each in turn.
"""
from __future__ import annotations

import builtins
import io
import json
import os
import pickle
import stat
import subprocess
import sys
from typing import Any, Callable

from statekit.spi.handles import checksum

_WRITE_MODES = frozenset("wax+")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: the exit code of a process killed at its crash point
KILLED = 86


def _writes(mode: Any) -> bool:
    return isinstance(mode, str) and bool(_WRITE_MODES & set(mode))


def _path(file: Any) -> str | None:
    return os.path.realpath(os.fsdecode(file)) if isinstance(file, (str, bytes, os.PathLike)) else None


class _Patches:
    """Replaces functions of ``os``, ``builtins`` and ``io`` until ``restore``."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def patch(self, owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
        real = getattr(owner, name)
        self._saved.append((owner, name, real))
        setattr(owner, name, wrap(real))

    def restore(self) -> None:
        while self._saved:
            owner, name, real = self._saved.pop()
            setattr(owner, name, real)


class _Watcher:
    """Calls ``on_open(path)`` when a file is opened for writing, ``on_move(kind, source, target)``
    before a rename, replace or link; subclasses add what they need."""

    def __init__(self) -> None:
        self._patches = _Patches()
        self.real_open = builtins.open

    def on_open(self, path: str, fd: int | None) -> None: ...

    def on_descriptor(self, path: str, fd: int) -> None:
        """Any ``os.open`` (for reading too)."""

    def on_move(self, kind: str, source: str, target: str) -> None: ...

    def __enter__(self) -> "_Watcher":
        def opening(real: Any) -> Any:
            def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
                handle = real(file, mode, *args, **kwargs)
                path = _path(file)
                if path is not None and _writes(mode):
                    self.on_open(path, handle.fileno() if hasattr(handle, "fileno") else None)
                return handle
            return open_

        def os_opening(real: Any) -> Any:
            def open_(file: Any, flags: int, *args: Any, **kwargs: Any) -> int:
                fd = real(file, flags, *args, **kwargs)
                path = _path(file)
                if path is not None and kwargs.get("dir_fd") is None:
                    self.on_descriptor(path, fd)
                    if flags & _WRITE_FLAGS:
                        self.on_open(path, fd)
                return fd
            return open_

        def moving(kind: str) -> Callable[[Any], Any]:
            def wrap(real: Any) -> Any:
                def move(source: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
                    self.on_move(kind, os.path.realpath(os.fsdecode(source)),
                                 os.path.join(os.path.realpath(os.path.dirname(os.fsdecode(target)) or "."),
                                              os.path.basename(os.fsdecode(target))))
                    return real(source, target, *args, **kwargs)
                return move
            return wrap

        self._patches.patch(builtins, "open", opening)
        self._patches.patch(io, "open", opening)
        self._patches.patch(os, "open", os_opening)
        for kind in ("rename", "replace", "link"):
            self._patches.patch(os, kind, moving(kind))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._patches.restore()


class DiskRecorder(_Watcher):
    """Records, while entered, the files written and directories created through Python, and the
    state of each file and directory at its last ``fsync`` (``os.fsync``, ``os.fdatasync``,
    ``os.sync``)."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, None] = {}  # written files, in order (a dict as an ordered set)
        self.directories: dict[str, None] = {}  # created directories
        #: (device, inode) of a file -> checksum of its bytes at its last fsync
        self._synced_bytes: dict[tuple[int, int], str] = {}
        #: (device, inode) of a directory -> its entries (name -> inode) at its last fsync
        self._synced_entries: dict[tuple[int, int], dict[str, int]] = {}
        self._fds: dict[int, str] = {}
        #: renames and replaces of files whose bytes were not synced: (source, target)
        self.unsynced_renames: list[tuple[str, str]] = []

    # --- what a storage does
    def on_open(self, path: str, fd: int | None) -> None:
        self.files.setdefault(path)
        if fd is not None:
            self._fds[fd] = path

    def on_descriptor(self, path: str, fd: int) -> None:
        self._fds[fd] = path

    def on_move(self, kind: str, source: str, target: str) -> None:
        self.files.setdefault(target)
        if kind != "link" and os.path.isfile(source) and not self._bytes_synced(source):
            self.unsynced_renames.append((source, target))

    def __enter__(self) -> "DiskRecorder":
        super().__enter__()

        def syncing(real: Any) -> Any:
            def sync(fd: int) -> None:
                real(fd)
                self._remember(fd)
            return sync

        def mkdir(real: Any) -> Any:
            def make(path: Any, *args: Any, **kwargs: Any) -> None:
                real(path, *args, **kwargs)
                if kwargs.get("dir_fd") is None:
                    self.directories.setdefault(os.path.realpath(os.fsdecode(path)))
            return make

        def sync_all(real: Any) -> Any:
            def sync() -> None:
                real()
                for path in [*self.files, *self.directories, *map(os.path.dirname, [*self.files, *self.directories])]:
                    self._remember_path(path)
            return sync

        self._patches.patch(os, "fsync", syncing)
        self._patches.patch(os, "fdatasync", syncing)
        self._patches.patch(os, "mkdir", mkdir)
        self._patches.patch(os, "sync", sync_all)
        return self

    def _remember(self, fd: int) -> None:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        if stat.S_ISDIR(info.st_mode):
            self._synced_entries[key] = {name: os.stat(name, dir_fd=fd, follow_symlinks=False).st_ino
                                         for name in os.listdir(fd)}
            return
        path = self._fds.get(fd)
        if path is None or not _same_file(path, info):
            path = _proc_path(fd)
        if path is not None and _same_file(path, info):
            self._synced_bytes[key] = self._checksum(path)

    def _remember_path(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            self._remember(fd)
        finally:
            os.close(fd)

    def _checksum(self, path: str) -> str:
        with self.real_open(path, "rb") as f:
            return checksum(f.read())

    def _bytes_synced(self, path: str) -> bool:
        info = os.stat(path)
        return self._synced_bytes.get((info.st_dev, info.st_ino)) == self._checksum(path)

    def _entry_synced(self, path: str) -> bool:
        parent = os.stat(os.path.dirname(path))
        entries = self._synced_entries.get((parent.st_dev, parent.st_ino), {})
        return entries.get(os.path.basename(path)) == os.stat(path, follow_symlinks=False).st_ino

    # --- what it left
    @property
    def touched(self) -> bool:
        """Whether anything was written or created on this machine's file system."""
        return bool(self.files or self.directories or self.unsynced_renames)

    def problems(self) -> list[str]:
        """What of the files written and the directories created (those still there) an OS crash
        could lose now: bytes not synced since they were last written, names not synced in their
        directory since the file or directory got them."""
        found = []
        for path in self.files:
            if not os.path.isfile(path):
                continue
            if not self._bytes_synced(path):
                found.append(f"{path}: its bytes were not fsynced after they were written")
            if not self._entry_synced(path):
                found.append(f"{path}: its directory was not fsynced after the file got its name there")
        for path in self.directories:
            if os.path.isdir(path) and not self._entry_synced(path):
                found.append(f"{path}/: the directory holding it was not fsynced after it was created")
        return found


def files_under(root: str) -> dict[str, tuple[int, int]]:
    """Every regular file below ``root``: path -> (size, modification time in nanoseconds)."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.realpath(os.path.join(directory, name))
            try:
                info = os.stat(path)
            except OSError:
                continue
            found[path] = (info.st_size, info.st_mtime_ns)
    return found


def unwatched_writes(root: str, before: dict[str, tuple[int, int]], watched: Any) -> list[str]:
    """Files below ``root`` created or changed since ``before`` (``files_under``) that are not in
    ``watched``: written by code the watchers cannot see (a native library such as SQLite)."""
    return sorted(path for path, seen in files_under(root).items() if before.get(path) != seen and path not in watched)


def _same_file(path: str, info: os.stat_result) -> bool:
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino)


def _proc_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


# ---------------------------------------------------------------------------- crashes


class _CrashPoints(_Watcher):
    """Counts crash points, and kills this process at point ``kill_at`` (counted from 0)."""

    def __init__(self, kill_at: int | None = None) -> None:
        super().__init__()
        self.kill_at = kill_at
        self.points: list[str] = []
        self.seen: set[str] = set()  # every path opened or moved to

    def on_descriptor(self, path: str, fd: int) -> None:
        self.seen.add(path)

    def _point(self, what: str) -> None:
        if len(self.points) == self.kill_at:
            sys.stdout.flush()
            os._exit(KILLED)
        self.points.append(what)

    def on_open(self, path: str, fd: int | None) -> None:
        self.seen.add(path)
        self._point(f"just after {_short(path)} was opened for writing (created or truncated, nothing written)")

    def on_move(self, kind: str, source: str, target: str) -> None:
        self.seen.add(target)
        self._point(f"just before the {kind} of {_short(source)} to {_short(target)}")


def _short(path: str) -> str:
    """The file's name and its directory's (the job directory differs from one crash to the next)."""
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


def crash_points(commit: Callable[[], Any]) -> tuple[list[str], set[str]]:
    """The crash points of ``commit()``, run in this process (each file opened for writing, each
    rename, replace and link, described), and every path it opened or moved a file to."""
    with _CrashPoints() as points:
        commit()
    return points.points, points.seen


def commit_killed_at(storage: Any, job_id: str, checkpoint_id: int, metadata: bytes, point: int,
                     timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``storage.create_access(job_id).commit(checkpoint_id, metadata)`` in a new Python process
    (this one's ``sys.path``), killed at crash point ``point``: its return code is ``KILLED`` when
    the commit reached that point."""
    order = pickle.dumps((storage, job_id, checkpoint_id, metadata, point)).hex()
    return subprocess.run([sys.executable, "-c", f"from {__name__} import _child; _child()"],
                          input=f"{json.dumps(sys.path)}\n{order}", capture_output=True, text=True, timeout=timeout)


def _child() -> None:
    path, order = sys.stdin.read().split("\n", 1)
    sys.path[:] = json.loads(path)  # first: the storage's class may live on a path the test added
    storage, job_id, checkpoint_id, metadata, point = pickle.loads(bytes.fromhex(order))
    access = storage.create_access(job_id)
    with _CrashPoints(point):
        access.commit(checkpoint_id, metadata)


__all__ = ["KILLED", "DiskRecorder", "commit_killed_at", "crash_points", "files_under", "unwatched_writes"]
