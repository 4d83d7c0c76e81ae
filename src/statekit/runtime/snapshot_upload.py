"""The asynchronous part of a task snapshot, run beside the task's remaining work.

After the synchronous part (``KeyedTask.snapshot``) the task still has work that does not touch
the snapshot: handing its output to the engine, and whatever else comes before it acknowledges.
``SnapshotUpload`` writes the snapshot on a thread meanwhile (Flink's asynchronous snapshot
part), when the backend declares ``async_snapshots``; otherwise ``result`` writes it in the
caller's thread. Either way the written snapshot holds exactly the synchronous part's view:
writes the task makes in the meantime never reach it (the conformance suite checks this through
this class).
"""
from __future__ import annotations

import contextvars
import threading

from statekit.checkpoint.metadata import SubtaskState
from statekit.runtime.task import PendingTaskSnapshot
from statekit.spi.storage import CheckpointStreams


class SnapshotUpload:
    def __init__(self, pending: PendingTaskSnapshot, streams: CheckpointStreams, concurrent: bool) -> None:
        self._pending = pending
        self._streams = streams
        self._state: SubtaskState | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if concurrent:
            # in the task's context: its checksum kind (``spi.handles.cryptographic_checksums``)
            self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._write,),
                                            name="statekit-snapshot-upload", daemon=True)
            self._thread.start()

    def _write(self) -> None:
        try:
            self._state = self._pending.write(self._streams)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the task's thread by result()
            self._error = exc

    def result(self) -> SubtaskState:
        """Wait for the upload; its handles, or the error it failed with."""
        if self._thread is None:
            if self._state is None and self._error is None:
                self._write()
        else:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._state is not None
        return self._state

    def abandon(self) -> None:
        """The task failed: wait for a running upload to end (nothing is written after the
        checkpoint is aborted), or drop a view that was never written."""
        if self._thread is not None:
            self._thread.join()
        elif self._state is None and self._error is None:
            self._pending.release()
