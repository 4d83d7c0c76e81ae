"""The handle of a stream stored as a row: its key in the ``streams`` table."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekit.spi.handles import StreamStateHandle, read_checksum, register_handle
from statekit.spi.json_fields import JsonObject, malformed

SHARED = "shared"


@register_handle("sqlite-stream")
@dataclass(frozen=True)
class SQLiteStreamHandle(StreamStateHandle):
    """``stream_id`` is the row's key (``<job>/chk-<n>/<name>`` or ``<job>/shared/<name>``): it
    names the job, so a checkpoint resolved by its pointer alone reads its streams."""

    stream_id: str
    size: int
    checksum: str

    @property
    def stored_as(self) -> str:
        return self.stream_id

    @property
    def shared(self) -> bool:
        return self.stream_id.split("/")[1] == SHARED

    def _fields_json(self) -> dict[str, Any]:
        return {"stream_id": self.stream_id, "size": self.size, "checksum": self.checksum}

    @classmethod
    def _from_fields(cls, data: JsonObject) -> "SQLiteStreamHandle":
        data.expect_fields(("type", "stream_id", "size", "checksum"))
        stream_id = data.text("stream_id")
        parts = stream_id.split("/")
        if len(parts) != 3 or not all(parts) or not (parts[1] == SHARED or parts[1].startswith("chk-")):
            malformed(data.path_of("stream_id"), "must be <job>/chk-<n>/<name> or <job>/shared/<name>", stream_id)
        return cls(stream_id, data.integer("size", 0), read_checksum(data, "checksum"))
