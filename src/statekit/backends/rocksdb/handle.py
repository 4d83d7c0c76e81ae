"""The handle of a native RocksDB snapshot: SST files shared across checkpoints (incremental)
plus the files private to this one (MANIFEST, CURRENT, OPTIONS; and every SST file of a full
native checkpoint). Its tag keeps the name it had when incremental snapshots were the only native ones."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from statekit.spi.handles import (
    RecordedStates, StateMetaInfo, StreamStateHandle, check_relative_path, nested_handle, read_key_group_range,
    read_serializer_snapshot, register_handle,
)
from statekit.spi.json_fields import JsonObject
from statekit.spi.key_groups import KeyGroupRange


@register_handle("rocksdb-incremental")
@dataclass(frozen=True)
class IncrementalRocksDBStateHandle(RecordedStates):
    key_group_range: KeyGroupRange
    checkpoint_id: int
    backend_id: str  # the RocksDB instance that wrote it: SST names are unique only per instance
    shared: dict[str, StreamStateHandle]  # SST file name -> stream
    private: dict[str, StreamStateHandle]  # other file name -> stream
    key_serializer: dict[str, Any]
    states: tuple[StateMetaInfo, ...]

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield from self.shared.values()
        yield from self.private.values()

    def _fields_json(self) -> dict[str, Any]:
        return {
            "key_group_range": self.key_group_range.to_json(), "checkpoint_id": self.checkpoint_id,
            "backend_id": self.backend_id,
            "shared": {n: h.to_json() for n, h in sorted(self.shared.items())},
            "private": {n: h.to_json() for n, h in sorted(self.private.items())},
            "key_serializer": self.key_serializer, "states": [s.to_json() for s in self.states],
        }

    @classmethod
    def _from_fields(cls, data: JsonObject) -> "IncrementalRocksDBStateHandle":
        data.expect_fields(("type", "key_group_range", "checkpoint_id", "backend_id", "shared", "private",
                            "key_serializer", "states"))

        def streams(key: str) -> dict[str, StreamStateHandle]:
            files = data.object(key)
            for name in files:  # each becomes a file of the RocksDB directory a restore downloads into
                check_relative_path(files.path_of(name), name, "the RocksDB instance directory", file_name=True)
            return {name: nested_handle(files, name, StreamStateHandle) for name in files}
        return cls(read_key_group_range(data), data.integer("checkpoint_id", 0), data.text("backend_id"),
                   streams("shared"), streams("private"), read_serializer_snapshot(data, "key_serializer"),
                   tuple(StateMetaInfo.from_json(s) for s in data.array("states").objects()))
