"""Snapshots on file systems found or written by location, whatever the storage: savepoints
(``<savepoint-dir>/savepoint-<id>/``, self-contained and movable) and ``resolve``, which finds a
completed checkpoint or savepoint by URL (``spark.statekit.restore.path``). Storages implement
``resolve_checkpoint`` and ``savepoint_location`` with these."""
from __future__ import annotations

import logging
import posixpath
import uuid
from typing import Any

import fsspec

from statekit.spi.errors import RestoreError, SnapshotError
from statekit.spi.storage import CompletedCheckpointPointer, ResolvedCheckpoint, SavepointTarget
from statekit.storage.layout import CHECKPOINT_DIR_PATTERN, METADATA_FILE, SAVEPOINT_PREFIX
from statekit.storage.urls import io_failure, open_url
from statekit.storage.files import (
    DEFAULT_MEMORY_THRESHOLD, FileSystemCheckpointStreams, check_writable, completed_checkpoint_ids,
    write_metadata_atomically,
)

SAVEPOINT_DIR_SETTING = "spark.statekit.savepoint.dir"

log = logging.getLogger(__name__)


class SavepointLocation(SavepointTarget):
    """Where one savepoint is written: ``<savepoint-dir>/savepoint-<id>/``."""

    def __init__(self, savepoint_dir: str, savepoint_id: str, storage_options: dict[str, Any] | None = None,
                 memory_threshold: int = DEFAULT_MEMORY_THRESHOLD) -> None:
        fs, root = open_url(savepoint_dir, SAVEPOINT_DIR_SETTING, storage_options)
        self.fs = fs
        self.directory = posixpath.join(root, f"{SAVEPOINT_PREFIX}{savepoint_id}")
        _check_absent(fs, self.directory)
        check_writable(fs, self.directory, SAVEPOINT_DIR_SETTING, savepoint_dir)
        # a savepoint's files are all exclusive and live beside its _metadata; their names carry
        # this attempt's tag, so that a failed attempt removes its own files and no one else's
        self.attempt = uuid.uuid4().hex[:16]
        self.streams = FileSystemCheckpointStreams(fs, self.directory, "", memory_threshold, SAVEPOINT_DIR_SETTING,
                                                   attempt=self.attempt)

    def commit(self, checkpoint_id: int, metadata: bytes) -> CompletedCheckpointPointer:
        write_metadata_atomically(self.fs, posixpath.join(self.directory, METADATA_FILE), metadata, SAVEPOINT_DIR_SETTING)
        return CompletedCheckpointPointer(checkpoint_id, self.fs.unstrip_protocol(self.directory), is_savepoint=True)

    def discard(self) -> None:
        """Remove the files this attempt wrote, then the directory if that left it empty. Nothing
        once a ``_metadata`` exists (this attempt's, or a concurrent one's of the same savepoint,
        which may be complete); a concurrent attempt's files are never touched. Called while an
        error propagates: a failure here is logged, never raised over it."""
        tag = f"-{self.attempt}-"
        try:
            if self.fs.exists(posixpath.join(self.directory, METADATA_FILE)):
                return
            for path in self.fs.find(self.directory):
                if tag in posixpath.basename(path):
                    self.fs.rm_file(path)
            if not self.fs.find(self.directory):
                self.fs.rmdir(self.directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("%s", io_failure("remove the failed savepoint", self.directory, exc, SAVEPOINT_DIR_SETTING))


def _check_absent(fs: fsspec.AbstractFileSystem, directory: str) -> None:
    """Refuse a savepoint whose ``_metadata`` exists before any of its files is written: its id
    names one savepoint, and a completed one is never added to nor overwritten."""
    try:
        exists = fs.exists(posixpath.join(directory, METADATA_FILE))
    except OSError as exc:
        raise SnapshotError(io_failure("read the savepoint at", directory, exc, SAVEPOINT_DIR_SETTING)) from exc
    if exists:
        raise SnapshotError(f"savepoint {fs.unstrip_protocol(directory)} already exists (a savepoint of the same "
                            f"checkpoint); restore from it, or delete it to take it again")


def resolve(url: str, storage_options: dict[str, Any] | None = None,
            setting: str = "spark.statekit.restore.path") -> ResolvedCheckpoint:
    """Find a completed snapshot by URL: a ``_metadata`` file, a ``chk-<n>`` or ``savepoint-<id>``
    directory, or a job directory (its latest completed checkpoint)."""
    fs, path = open_url(url, setting, storage_options)
    if posixpath.basename(path) == METADATA_FILE:
        path = posixpath.dirname(path)
    try:
        return _resolve(fs, path, url, setting)
    except OSError as exc:
        raise RestoreError(io_failure("read the snapshot at", path, exc, setting)) from exc


def _resolve(fs: fsspec.AbstractFileSystem, path: str, url: str, setting: str) -> ResolvedCheckpoint:
    metadata_path = posixpath.join(path, METADATA_FILE)
    if not fs.exists(metadata_path):
        if not fs.exists(path):  # e.g. a wrong job id: not "a checkpoint that never completed"
            raise RestoreError(f"{setting}={url!r} does not exist: give a _metadata file, a chk-<n> or "
                               f"savepoint-<id> directory, or a job directory")
        if CHECKPOINT_DIR_PATTERN.match(posixpath.basename(path)):
            raise RestoreError(f"{setting}={url!r} is not a completed checkpoint or savepoint: {metadata_path} "
                               f"does not exist (a checkpoint without _metadata never completed)")
        completed = completed_checkpoint_ids(fs, path)
        if not completed:
            raise RestoreError(f"{setting}={url!r} holds no completed checkpoint (no chk-<n>/_metadata)")
        path = posixpath.join(path, f"chk-{completed[-1]}")
        metadata_path = posixpath.join(path, METADATA_FILE)
    data = fs.cat_file(metadata_path)
    # checkpoint handles are relative to the job directory, savepoint handles to their own
    match = CHECKPOINT_DIR_PATTERN.match(posixpath.basename(path))
    root = posixpath.dirname(path) if match else path
    checkpoint_id = int(match.group(1)) if match else -1
    pointer = CompletedCheckpointPointer(checkpoint_id, fs.unstrip_protocol(path), is_savepoint=not match,
                                         job_id=posixpath.basename(root) if match else None)
    return ResolvedCheckpoint(pointer, data, FileSystemCheckpointStreams(fs, root))
