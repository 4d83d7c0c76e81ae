"""``HashingSink``: where an Arrow IPC writer's many small writes go on their way to a checkpoint
stream. It checksums them in segments (``cut``, one per key group or state), gathers them into
chunks of ``CHUNK_BYTES`` and hands full chunks to a background thread that writes them to the
stream, so that the stream's work (its checksum, the file system's write or upload) runs while the
snapshot writer builds the next record batches. At most ``MAX_PENDING_CHUNKS`` chunks wait; a
snapshot smaller than one chunk is written by the caller's thread at ``finish``, with no thread.
"""
from __future__ import annotations

import io
import queue
import threading

from statekit.spi.handles import StreamChecksum
from statekit.spi.storage import CheckpointOutputStream

#: bytes handed to the stream per write
CHUNK_BYTES = 1 << 20
#: chunks waiting for the background thread at most (the memory bound is about this many chunks)
MAX_PENDING_CHUNKS = 8
_DONE = None


class HashingSink(io.RawIOBase):
    """Forwards writes to a checkpoint stream in large chunks and checksums them in segments
    (``cut``). Call ``finish`` (all written) or ``abort`` (stop writing) before the stream is
    closed or discarded."""

    def __init__(self, out: CheckpointOutputStream) -> None:
        self._out = out
        self._position = out.tell()
        self._hasher = StreamChecksum()
        self._buffer = bytearray()
        self._chunks: queue.Queue[bytearray | None] = queue.Queue(MAX_PENDING_CHUNKS)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._aborted = False

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[no-untyped-def,override]
        n = memoryview(data).nbytes
        if self._aborted:  # what a buffered writer still holds when it is dropped
            return n
        self._hasher.update(data)
        self._buffer += data
        self._position += n
        if len(self._buffer) >= CHUNK_BYTES:
            self._hand_over()
        return n

    def tell(self) -> int:
        return self._position

    def cut(self) -> str:
        """The checksum of the bytes since the previous cut (same function as ``checksum``)."""
        digest = self._hasher.hexdigest()
        self._hasher.reset()
        return digest

    def _hand_over(self) -> None:
        if self._error is not None:
            raise self._error
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_chunks, name="statekit-snapshot-writer", daemon=True)
            self._thread.start()
        chunk, self._buffer = self._buffer, bytearray()
        self._chunks.put(chunk)

    def _write_chunks(self) -> None:
        while (chunk := self._chunks.get()) is not _DONE:
            if self._error is None:
                try:
                    self._out.write(chunk)
                except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                    self._error = exc

    def _join(self) -> None:
        if self._thread is not None:
            self._chunks.put(_DONE)
            self._thread.join()
            self._thread = None

    def finish(self) -> None:
        """Write what remains and wait for every chunk; raises the stream's error, if any."""
        self._join()
        if self._error is not None:
            raise self._error
        if self._buffer:
            self._out.write(self._buffer)
            self._buffer = bytearray()

    def abort(self) -> None:
        """Stop writing (the caller discards the stream); later writes are dropped."""
        self._aborted = True
        self._error = self._error or InterruptedError("the snapshot was aborted")
        self._join()
        self._buffer = bytearray()
