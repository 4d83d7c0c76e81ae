"""Streams whose bytes travel inside their handles (``InlineStateHandle``)."""
from __future__ import annotations

from statekit.spi.errors import CorruptStateError, RestoreError, SnapshotError
from statekit.spi.handles import InlineStateHandle, StreamStateHandle, verify_checksum
from statekit.spi.storage import CheckpointOutputStream, CheckpointStreams, StateScope


class InlineOutputStream(CheckpointOutputStream):
    def __init__(self, on_close=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self._buffer = bytearray()
        self._on_close = on_close

    def write(self, data) -> int:  # type: ignore[no-untyped-def,override]
        if self.closed:
            raise SnapshotError("write to a closed checkpoint stream")
        self._buffer += data
        return memoryview(data).nbytes

    def tell(self) -> int:
        return len(self._buffer)

    def close_and_get_handle(self) -> StreamStateHandle:
        handle = InlineStateHandle(bytes(self._buffer))
        self._buffer = bytearray()
        self.close()
        if self._on_close is not None:
            self._on_close(handle)
        return handle

    def discard(self) -> None:
        self._buffer = bytearray()
        self.close()


class InlineStreams(CheckpointStreams):
    """Reads inline handles; writes inline handles. Reading a file handle is an error."""

    def create_output(self, scope: StateScope = StateScope.EXCLUSIVE,
                      name: str | None = None) -> CheckpointOutputStream:
        return InlineOutputStream()

    def read(self, handle: StreamStateHandle) -> bytes:
        data = self._inline(handle).data
        verify_checksum(data, handle.checksum, "inline state")
        return data

    def read_range(self, handle: StreamStateHandle, offset: int, length: int) -> bytes:
        data = self._inline(handle).data
        if offset < 0 or offset + length > len(data):
            raise CorruptStateError(
                f"inline state is truncated: range [{offset}, {offset + length}) beyond its {len(data)} bytes")
        return data[offset:offset + length]

    @staticmethod
    def _inline(handle: StreamStateHandle) -> InlineStateHandle:
        if not isinstance(handle, InlineStateHandle):
            raise RestoreError(
                f"a {type(handle).__name__} cannot be read by the jobmanager storage; restore it "
                f"with the storage that wrote it (e.g. spark.statekit.checkpoint.storage=filesystem)")
        return handle
