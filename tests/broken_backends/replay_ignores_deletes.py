"""A backend whose local recovery replays a journal that has no deletes: a cleared cell comes back.

The heap backend with ``local_recovery``: on ``dispose`` it appends the cells it holds to a journal
in ``working_dir`` (one canonical snapshot a segment) and, with ``resume_local_state``, replays
every segment in order, each cell of a segment replacing the one before. A cell cleared since an
earlier segment is in no later one, so nothing removes it: it is back after the next resume. One
resume after one epoch (one segment) is right.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

from statekit.backends.common.canonical import read_key_groups
from statekit.backends.heap import HeapStateBackend
from statekit.backends.heap.backend import HeapKeyedStateBackend
from statekit.spi import Capabilities, KeyedBackendParams, SnapshotOptions, SnapshotType, StateHandle
from statekit.storage.inline import InlineStreams

SEGMENT = "journal-{:06d}.json"


class JournalKeyedBackend(HeapKeyedStateBackend):
    def __init__(self, params: KeyedBackendParams, backend: HeapStateBackend) -> None:
        resume = params.resume_local_state and params.working_dir is not None
        # the working directory holds the state: restore nothing from the handles
        super().__init__(replace(params, restore_handles=()) if resume else params, backend.changelog,
                         snapshot_compression=backend.snapshot_compression)
        self.params = params
        self._journal = params.working_dir
        if self._journal is None:
            return
        os.makedirs(self._journal, exist_ok=True)
        segments = sorted(name for name in os.listdir(self._journal) if name.startswith("journal-"))
        if not resume:
            for name in segments:
                os.remove(os.path.join(self._journal, name))
            return
        self.resume_bookkeeping(params.restore_handles)
        streams = InlineStreams()
        for name in segments:
            with open(os.path.join(self._journal, name)) as f:
                handle = StateHandle.from_json(json.load(f))
            self.adopt_state_metas(handle.state_meta_infos(), handle.key_serializer_snapshot())
            for key_group, batch in read_key_groups(handle, streams, handle.restore_key_groups(self.key_group_range)):
                self._delete_cells(key_group, batch, list(range(batch.num_rows)))  # the segment's cells replace
                self._load_batch(key_group, batch)
        self._key_cache = {}

    def dispose(self) -> None:
        if self._journal is not None:
            handle = self.snapshot(0, SnapshotOptions(SnapshotType.SAVEPOINT)).write(InlineStreams())
            if handle is not None:
                count = sum(name.startswith("journal-") for name in os.listdir(self._journal))
                with open(os.path.join(self._journal, SEGMENT.format(count + 1)), "w") as f:
                    json.dump(handle.to_json(), f)
            self._journal = None
        super().dispose()


class ReplayIgnoresDeletesBackend(HeapStateBackend):
    name = "broken-replay-ignores-deletes"
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=True, native_snapshots=True,
                                local_recovery=True)

    def create_keyed_backend(self, params: KeyedBackendParams) -> JournalKeyedBackend:
        return JournalKeyedBackend(params, self)
