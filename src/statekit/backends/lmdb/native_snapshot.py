"""Full LMDB checkpoints in LMDB's own format (``SnapshotFormat.NATIVE``): a compacted copy of the
environment at the snapshot's point in time (``mdb_env_copyfd2`` of its read transaction), stored as
one file, exclusive to the checkpoint.

The synchronous part is a canonical snapshot's (commit, begin a read transaction); the
asynchronous part lets LMDB copy the B+tree pages it references into a private file, through the
page cache (``read_snapshot.copy_environment``), and uploads that (``CheckpointStreams.upload_file``:
a rename or a kernel copy on ``file://``, checksummed from the page cache). A restore at the same key
groups puts the file in place as the new environment's data file; a rescale opens each file
read-only and copies the key-group range it needs, table by table (every stored key starts with
its key group, timer indexes included).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import lmdb

from statekit.backends.common.key_layout import key_group_bounds
from statekit.backends.lmdb.cursors import database_names, read_range
from statekit.backends.lmdb.read_snapshot import DATA_FILE, ReadSnapshot
from statekit.spi.backend import PendingSnapshot, released_snapshot
from statekit.spi.errors import SnapshotError
from statekit.spi.handles import (
    RecordedStates, StateHandle, StateMetaInfo, StreamStateHandle, nested_handle, read_key_group_range,
    read_serializer_snapshot, register_handle,
)
from statekit.spi.json_fields import JsonObject
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.storage import CheckpointStreams, StateScope

#: entries copied per ``put_many`` when a rescale reads a range of a stored environment
COPY_CHUNK = 8192


@register_handle("lmdb-native")
@dataclass(frozen=True)
class NativeLMDBStateHandle(RecordedStates):
    key_group_range: KeyGroupRange
    data: StreamStateHandle  # the compacted environment's data file
    key_serializer: dict[str, Any]
    states: tuple[StateMetaInfo, ...]

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield self.data

    def _fields_json(self) -> dict[str, Any]:
        return {"key_group_range": self.key_group_range.to_json(), "data": self.data.to_json(),
                "key_serializer": self.key_serializer, "states": [s.to_json() for s in self.states]}

    @classmethod
    def _from_fields(cls, data: JsonObject) -> "NativeLMDBStateHandle":
        data.expect_fields(("type", "key_group_range", "data", "key_serializer", "states"))
        return cls(read_key_group_range(data), nested_handle(data, "data", StreamStateHandle),
                   read_serializer_snapshot(data, "key_serializer"),
                   tuple(StateMetaInfo.from_json(s) for s in data.array("states").objects()))


class NativeLMDBSnapshot(PendingSnapshot):
    def __init__(self, snapshot: ReadSnapshot, work_dir: str, key_group_range: KeyGroupRange,
                 metas: list[StateMetaInfo], key_serializer: dict[str, Any]) -> None:
        self._snapshot = snapshot
        self._work_dir = work_dir
        self._key_group_range = key_group_range
        self._metas = metas
        self._key_serializer = key_serializer
        self._released = False

    def write(self, streams: CheckpointStreams) -> StateHandle | None:
        if self._released:
            raise released_snapshot()
        directory = None
        try:
            directory = tempfile.mkdtemp(prefix="native-", dir=self._work_dir)
            self._snapshot.copy_to(directory)
            data = streams.upload_file(os.path.join(directory, DATA_FILE), StateScope.EXCLUSIVE, "lmdb-data",
                                       move=True)  # the copy is written for this checkpoint
        except (OSError, lmdb.Error) as exc:
            raise SnapshotError(f"cannot copy the LMDB environment for a native checkpoint into "
                                f"{directory or self._work_dir}: {exc}") from exc
        finally:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
            self.release()
        return NativeLMDBStateHandle(self._key_group_range, data, self._key_serializer, tuple(self._metas))

    def release(self) -> None:
        self._released = True
        self._snapshot.release()


def download(handle: NativeLMDBStateHandle, streams: CheckpointStreams, env_dir: str) -> None:
    """The stored environment of ``handle`` as the data file of ``env_dir`` (a copy: LMDB writes to it)."""
    os.makedirs(env_dir, exist_ok=True)
    with open(os.path.join(env_dir, DATA_FILE), "wb") as f:
        streams.copy_to(handle.data, f)


def copy_range(handle: NativeLMDBStateHandle, streams: CheckpointStreams, target: KeyGroupRange, work_dir: str,
               put_many: Callable[[str, list[tuple[bytes, bytes]]], None], max_dbs: int) -> None:
    """Every entry of ``handle``'s tables in the key groups of ``target``, to ``put_many(table, entries)``."""
    overlap = handle.key_group_range.intersection(target)
    if not len(overlap):
        return
    lower, upper = key_group_bounds(overlap)
    directory = tempfile.mkdtemp(prefix="rescale-", dir=work_dir)
    try:
        download(handle, streams, directory)
        env = lmdb.open(directory, readonly=True, lock=False, max_dbs=max_dbs, readahead=False, subdir=True)
        try:
            with env.begin() as txn:
                for name in database_names(txn):
                    db = env.open_db(name, txn=txn, create=False)
                    start = lower
                    while True:
                        with txn.cursor(db) as cursor:
                            chunk = read_range(cursor, start, upper, COPY_CHUNK, env.max_key_size())
                        if chunk:
                            put_many(name.decode("utf-8"), chunk)
                        if len(chunk) < COPY_CHUNK:
                            break
                        start = chunk[-1][0] + b"\x00"
        finally:
            env.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
