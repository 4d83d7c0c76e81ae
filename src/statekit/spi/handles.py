"""State handles: small JSON-serializable records that point at snapshot bytes.

Every handle type registers a tag so that checkpoint metadata can round-trip any handle,
including those a plugin defines (``@register_handle("my-tag")``). File paths are relative to
the root of the checkpoint storage, which keeps savepoints relocatable.
"""
from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, TypeVar

import xxhash

from statekit.spi.errors import CorruptStateError, RestoreError
from statekit.spi.key_groups import KeyGroupRange

_HANDLE_TYPES: dict[str, type["StateHandle"]] = {}
H = TypeVar("H", bound=type)

def checksum(data: bytes | memoryview) -> str:
    """The checksum every handle records: xxh3 64-bit, hex."""
    return xxhash.xxh3_64_hexdigest(data)


def verify_checksum(data: bytes | memoryview, expected: str, what: str) -> None:
    """Raise ``CorruptStateError`` naming ``what`` unless ``data`` has the expected checksum."""
    actual = checksum(data)
    if actual != expected:
        raise CorruptStateError(
            f"{what} is corrupt: checksum {actual} does not match the recorded {expected} "
            f"({len(data)} bytes read). Restore from an earlier checkpoint or savepoint.")


def register_handle(tag: str) -> Callable[[H], H]:
    def decorate(cls: H) -> H:
        existing = _HANDLE_TYPES.get(tag)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"handle tag {tag!r} is taken by {existing.__qualname__}")
        _HANDLE_TYPES[tag] = cls  # type: ignore[assignment]
        cls.TAG = tag  # type: ignore[attr-defined]
        return cls
    return decorate


#: the entry-point groups of backend and storage plugins (``statekit.plugins`` resolves names in them)
BACKEND_GROUP = "statekit.backends"
STORAGE_GROUP = "statekit.storages"


def _import_plugins() -> None:
    """Import every installed backend and storage module, so that their handle types register:
    metadata may be read (by the CLI, or on a restart) before the backend that wrote it is used."""
    from importlib.metadata import entry_points

    for group in (BACKEND_GROUP, STORAGE_GROUP):
        for entry_point in entry_points(group=group):
            try:
                entry_point.load()
            except Exception:  # noqa: BLE001 - a broken plugin fails where it is selected, with its own error
                continue


class StateHandle(ABC):
    TAG: ClassVar[str]

    @abstractmethod
    def _fields_json(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def _from_fields(cls, data: dict[str, Any]) -> "StateHandle": ...

    def to_json(self) -> dict[str, Any]:
        return {"type": self.TAG, **self._fields_json()}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "StateHandle":
        tag = data.get("type")
        cls = _HANDLE_TYPES.get(tag)  # type: ignore[arg-type]
        if cls is None:
            _import_plugins()  # a backend registers its handle types when its module is imported
            cls = _HANDLE_TYPES.get(tag)  # type: ignore[arg-type]
        if cls is None:
            raise RestoreError(
                f"unknown state handle type {tag!r}; the package that wrote it (a backend or storage "
                f"plugin) must be installed. Known types: {sorted(_HANDLE_TYPES)}")
        return cls._from_fields(data)

    def stream_handles(self) -> Iterator["StreamStateHandle"]:
        """Every stream (file or inline bytes) this handle references."""
        return iter(())

    @property
    def state_size(self) -> int:
        return sum(h.size for h in self.stream_handles())


# ---------------------------------------------------------------------------- byte streams


class StreamStateHandle(StateHandle):
    size: int
    checksum: str

    def stream_handles(self) -> Iterator["StreamStateHandle"]:
        yield self


@register_handle("file")
@dataclass(frozen=True)
class FileStateHandle(StreamStateHandle):
    """A file under the storage root; ``path`` is relative to that root (POSIX separators)."""

    path: str
    size: int
    checksum: str

    def _fields_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "checksum": self.checksum}

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> "FileStateHandle":
        return cls(data["path"], int(data["size"]), data["checksum"])


@register_handle("inline")
@dataclass(frozen=True)
class InlineStateHandle(StreamStateHandle):
    """Bytes carried in the handle itself (small state, and the ``jobmanager`` storage)."""

    data: bytes
    size: int = field(init=False)
    checksum: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", len(self.data))
        object.__setattr__(self, "checksum", checksum(self.data))

    def _fields_json(self) -> dict[str, Any]:
        return {"data": base64.b64encode(self.data).decode("ascii"), "checksum": self.checksum}

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> "InlineStateHandle":
        handle = cls(base64.b64decode(data["data"]))
        if data.get("checksum") not in (None, handle.checksum):
            raise CorruptStateError("inline state bytes do not match their recorded checksum")
        return handle


# ---------------------------------------------------------------------------- keyed state


@dataclass(frozen=True)
class ByteRange:
    """A slice of a stream with its own checksum, so a part can be read and verified alone."""

    offset: int
    length: int
    checksum: str

    @property
    def end(self) -> int:
        return self.offset + self.length

    def to_json(self) -> list[Any]:
        return [self.offset, self.length, self.checksum]

    @classmethod
    def from_json(cls, data: list[Any]) -> "ByteRange":
        return cls(int(data[0]), int(data[1]), data[2])


@dataclass(frozen=True)
class StateMetaInfo:
    """What a snapshot records of one state: its kind and the serializers that wrote it."""

    name: str
    kind: str
    serializers: dict[str, Any]  # role -> SerializerSnapshot JSON
    ttl_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "serializers": self.serializers,
                "ttl_seconds": self.ttl_seconds}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "StateMetaInfo":
        return cls(data["name"], data["kind"], dict(data["serializers"]), data.get("ttl_seconds"))


class KeyedStateHandle(StateHandle):
    """State of one key-group range of one subtask."""

    key_group_range: KeyGroupRange

    def restore_key_groups(self, target: KeyGroupRange) -> KeyGroupRange:
        return self.key_group_range.intersection(target)


@register_handle("key-groups")
@dataclass(frozen=True)
class KeyGroupsStateHandle(KeyedStateHandle):
    """A canonical-format snapshot: one stream, with the byte range of every key group in it.

    ``key_serializer`` and ``states`` describe how the bytes were written; restoring a range
    reads only the byte ranges of its key groups.
    """

    key_group_range: KeyGroupRange
    stream: StreamStateHandle
    key_groups: dict[int, ByteRange]
    key_serializer: dict[str, Any]
    states: tuple[StateMetaInfo, ...]
    format: str = "canonical-arrow-v1"

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield self.stream

    def _fields_json(self) -> dict[str, Any]:
        return {
            "key_group_range": self.key_group_range.to_json(),
            "stream": self.stream.to_json(),
            "key_groups": [[kg, *r.to_json()] for kg, r in sorted(self.key_groups.items())],
            "key_serializer": self.key_serializer,
            "states": [s.to_json() for s in self.states],
            "format": self.format,
        }

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> "KeyGroupsStateHandle":
        stream = StateHandle.from_json(data["stream"])
        assert isinstance(stream, StreamStateHandle)
        return cls(
            KeyGroupRange.from_json(data["key_group_range"]),
            stream,
            {int(e[0]): ByteRange.from_json(e[1:]) for e in data["key_groups"]},
            dict(data["key_serializer"]),
            tuple(StateMetaInfo.from_json(s) for s in data["states"]),
            data.get("format", "canonical-arrow-v1"),
        )


# ---------------------------------------------------------------------------- operator state


class OperatorStateMode:
    SPLIT_DISTRIBUTE = "split"  # list state: elements are split round-robin on rescale
    UNION = "union"  # union list state: every subtask gets every element
    BROADCAST = "broadcast"  # broadcast map: identical on every subtask, copied on rescale


@register_handle("operator")
@dataclass(frozen=True)
class OperatorStateHandle(StateHandle):
    """Operator state of one subtask: one stream, with the byte range and mode of each state."""

    stream: StreamStateHandle
    states: dict[str, tuple[str, ByteRange]]  # name -> (mode, byte range)
    serializers: dict[str, dict[str, Any]]  # name -> role -> SerializerSnapshot JSON

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield self.stream

    def _fields_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream.to_json(),
            "states": {n: [mode, r.to_json()] for n, (mode, r) in sorted(self.states.items())},
            "serializers": self.serializers,
        }

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> "OperatorStateHandle":
        stream = StateHandle.from_json(data["stream"])
        assert isinstance(stream, StreamStateHandle)
        return cls(stream,
                   {n: (m, ByteRange.from_json(r)) for n, (m, r) in data["states"].items()},
                   {n: dict(s) for n, s in data["serializers"].items()})
