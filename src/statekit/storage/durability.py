"""Making files on this machine's file system (``file://``) durable before they are relied on.

A checkpoint's ``_metadata``, a savepoint's, and a sink's pre-committed output are promises that
the files they name exist. On a local file system a closed file may still be only in the page
cache, and a new directory entry (a created file, a rename) only in memory: an OS crash or a power
loss could then keep the promise and lose the files. These helpers ``fsync`` the file and the
directory entries that lead to it. Other file systems and object stores make a file durable when it
is closed (HDFS) or written (S3), and need none of this.
"""
from __future__ import annotations

import errno
import os

import fsspec

#: file systems whose paths are this machine's
_LOCAL_PROTOCOLS = frozenset({"file", "local"})


def protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    protocol = fs.protocol
    return protocol[0] if isinstance(protocol, (tuple, list)) else protocol


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """``fs`` is this machine's file system: its paths are paths ``os`` takes."""
    return protocol_of(fs) in _LOCAL_PROTOCOLS


def sync_to_disk(path: str) -> None:
    """Flush the local file ``path`` to the disk, with the directory entries that lead to it (see
    ``sync_directories``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    sync_directories(path)


def sync_directories(path: str) -> None:
    """Flush the entry of ``path`` in its directory and that directory's entry in its parent:
    statekit's files are at most two levels below a directory whose own entry is on the disk
    (``<job>/chk-<n>/``, ``<job>/shared/``, ``<savepoint-dir>/savepoint-<id>/``,
    ``<sink-dir>/_staging/``; those directories are synced as ``make_directories``
    creates them)."""
    directory = os.path.dirname(path)
    sync_directory(directory)
    sync_directory(os.path.dirname(directory))


def sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):  # file systems that cannot sync one
            raise
    finally:
        os.close(fd)


def make_directories(fs: fsspec.AbstractFileSystem, directory: str) -> None:
    """``fs.makedirs(directory, exist_ok=True)``; on this machine's file system, durably."""
    if is_local(fs):
        _make_directories_durably(directory)
    else:
        fs.makedirs(directory, exist_ok=True)


def _make_directories_durably(directory: str) -> None:
    """``os.makedirs``, then sync the entry of every directory it created in its parent: files
    below a new directory must not outlive it in an OS crash."""
    created = []
    missing = os.path.abspath(directory)  # a relative path's parents end in "", never a directory
    while not os.path.isdir(missing):
        created.append(missing)
        missing = os.path.dirname(missing)
    os.makedirs(directory, exist_ok=True)
    for new in created:
        sync_directory(os.path.dirname(new))
