"""msgpack: compact and language-neutral for None, bool, numbers, str, bytes, lists and maps."""
from __future__ import annotations

from typing import Any

import msgpack

from statekit.spi.errors import SerializationError
from statekit.spi.serializer import TypeSerializer


class MsgpackSerializer(TypeSerializer):
    def __init__(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)

    def serialize(self, value: Any) -> bytes:
        try:
            return self._packer.pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(
                f"msgpack cannot encode a value of type {type(value).__name__}: {exc}; use "
                f"PickleSerializer for arbitrary objects") from exc

    def deserialize(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
        except Exception as exc:
            raise SerializationError(f"cannot decode {len(data)} bytes as msgpack: {exc}") from exc

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]
