"""State handles: small JSON-serializable records that point at snapshot bytes.

Every handle type registers a tag so that checkpoint metadata can round-trip any handle,
including those a plugin defines (``@register_handle("my-tag")``). File paths are relative to
the root of the checkpoint storage, which keeps savepoints relocatable.
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import hashlib
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Mapping, TypeVar

import xxhash

from statekit.spi.descriptors import StateKind, TtlTimeCharacteristic
from statekit.spi.errors import ConfigurationError, CorruptStateError, RestoreError, StatekitError
from statekit.spi.json_fields import JsonArray, JsonObject, as_object, malformed
from statekit.spi.key_groups import UPPER_BOUND_MAX_PARALLELISM, KeyGroupRange
from statekit.spi.names import relative_path_problem
from statekit.spi.serializer import SerializerSnapshot

_HANDLE_TYPES: dict[str, type["StateHandle"]] = {}
H = TypeVar("H", bound=type)
HandleT = TypeVar("HandleT", bound="StateHandle")
_CHECKSUM = re.compile(r"(?:[0-9a-f]{16}|sha256:[0-9a-f]{64})\Z")
#: the prefix of a SHA-256 checksum; the other form, bare 16 hex digits, is xxh3-64
SHA256 = "sha256:"
#: (new checksums are SHA-256, a checksum read must be SHA-256)
_cryptographic: contextvars.ContextVar[tuple[bool, bool]] = contextvars.ContextVar(
    "statekit_cryptographic_checksums", default=(False, False))


@contextlib.contextmanager
def cryptographic_checksums(on: bool, required: bool = True) -> Iterator[None]:
    """Within this scope (of this thread or task; a thread started in it with the scope's context
    too), new checksums are SHA-256 and, ``required``, a checksum read that is not is refused: a
    signed checkpoint's ``_metadata`` vouches for its files only through checksums no one can
    forge. Without ``on``, the scope keeps the enclosing one's choice; outside every scope, xxh3-64."""
    writes, reads = _cryptographic.get()
    token = _cryptographic.set((writes or on, reads or on and required))
    try:
        yield
    finally:
        _cryptographic.reset(token)


def checksum(data: bytes | memoryview) -> str:
    """The checksum every handle records: xxh3-64 as 16 hex digits, or ``sha256:<hex>`` within
    ``cryptographic_checksums``."""
    hasher = StreamChecksum()
    hasher.update(data)
    return hasher.hexdigest()


class StreamChecksum:
    """The handle checksum of bytes written in pieces: ``update`` with each, then ``hexdigest``
    equals ``checksum`` of them all (what a storage's output stream records). ``for_checksum``
    makes one that checks bytes against a recorded checksum, of that checksum's kind."""

    def __init__(self, cryptographic: bool | None = None) -> None:
        self._cryptographic = _cryptographic.get()[0] if cryptographic is None else cryptographic
        self._hash: Any = hashlib.sha256() if self._cryptographic else xxhash.xxh3_64()

    @classmethod
    def for_checksum(cls, expected: str) -> "StreamChecksum":
        return cls(expected.startswith(SHA256))

    def update(self, data: bytes | memoryview) -> None:
        self._hash.update(data)

    def reset(self) -> None:
        """Start again, as a new one of the same kind."""
        self._hash = hashlib.sha256() if self._cryptographic else xxhash.xxh3_64()

    def hexdigest(self) -> str:
        digest = self._hash.hexdigest()
        return SHA256 + digest if self._cryptographic else digest

    def verify(self, expected: str, size: int, what: str) -> None:
        """``verify_checksum`` for the bytes seen so far (``size`` of them)."""
        _verify_digest(self.hexdigest(), expected, size, what)


def verify_checksum(data: bytes | memoryview, expected: str, what: str) -> None:
    """Raise ``CorruptStateError`` naming ``what`` unless ``data`` has the expected checksum."""
    hasher = StreamChecksum.for_checksum(expected)
    hasher.update(data)
    _verify_digest(hasher.hexdigest(), expected, len(data), what)


def _verify_digest(actual: str, expected: str, size: int, what: str) -> None:
    if _cryptographic.get()[1] and not expected.startswith(SHA256):
        raise CorruptStateError(
            f"{what} has an xxh3 checksum, which a signed checkpoint's metadata cannot vouch for (anyone can write "
            f"other bytes with the same one): it was written without signing. Take a savepoint of it with the "
            f"signing secret set (statekit savepoint create --sign) and restore from that")
    if actual != expected:
        raise CorruptStateError(
            f"{what} is corrupt: checksum {actual} does not match the recorded {expected} "
            f"({size} bytes read). Restore from an earlier checkpoint or savepoint.")


def register_handle(tag: str) -> Callable[[H], H]:
    def decorate(cls: H) -> H:
        existing = _HANDLE_TYPES.get(tag)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ConfigurationError(f"handle tag {tag!r} is taken by {existing.__qualname__}; choose another tag")
        _HANDLE_TYPES[tag] = cls  # type: ignore[assignment]
        cls.TAG = tag  # type: ignore[attr-defined]
        return cls
    return decorate


#: called once when a handle type is unknown, to import the modules that may register it
#: (``statekit.registry`` installs its ``load_handle_types``; the SPI itself knows no plugins)
_unknown_type_hooks: list[Callable[[], None]] = []


def on_unknown_handle_type(hook: Callable[[], None]) -> None:
    """Call ``hook`` when metadata names a handle type nobody registered yet."""
    if hook not in _unknown_type_hooks:
        _unknown_type_hooks.append(hook)


class StateHandle(ABC):
    TAG: ClassVar[str]

    @abstractmethod
    def _fields_json(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def _from_fields(cls, data: JsonObject) -> "StateHandle":
        """The handle from its JSON (``to_json``'s output, ``type`` included). ``data`` is a
        ``JsonObject``: read fields with its typed getters, so that bad input raises
        ``CorruptStateError`` naming the field."""

    def to_json(self) -> dict[str, Any]:
        return {"type": self.TAG, **self._fields_json()}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> "StateHandle":
        """The handle ``data`` describes. Malformed data raises ``CorruptStateError`` naming the
        field (its JSON path when ``data`` is a ``JsonObject`` of a larger document)."""
        obj = as_object(data)
        tag = obj.text("type")
        cls = _HANDLE_TYPES.get(tag)
        for hook in _unknown_type_hooks if cls is None else ():
            hook()  # a backend registers its handle types when its module is imported
            cls = _HANDLE_TYPES.get(tag)
            if cls is not None:
                break
        if cls is None:
            raise RestoreError(
                f"field {obj.path_of('type')}: unknown state handle type {tag!r}; the package that wrote it "
                f"(a backend or storage plugin) must be installed. Known types: {sorted(_HANDLE_TYPES)}")
        try:
            return cls._from_fields(obj)
        except StatekitError:
            raise
        except (KeyError, TypeError, ValueError, AssertionError, AttributeError, IndexError) as exc:
            # a plugin's handle that reads its fields without checking them
            raise CorruptStateError(f"field {obj.path} (a {tag!r} state handle) is malformed: "
                                    f"{type(exc).__name__}: {exc}") from exc

    def stream_handles(self) -> Iterator["StreamStateHandle"]:
        """Every stream (file or inline bytes) this handle references."""
        return iter(())

    @property
    def state_size(self) -> int:
        return sum(h.size for h in self.stream_handles())


def nested_handle(data: JsonObject, key: str | int, expected: type[HandleT]) -> HandleT:
    """The handle in field ``key`` of ``data``, which must be an ``expected``."""
    handle = StateHandle.from_json(data.object(key))
    if not isinstance(handle, expected):
        malformed(data.path_of(key), f"must be a {expected.__name__}, not a {type(handle).__name__}",
                  show_value=False)
    return handle


def read_key_group_range(data: JsonObject, key: str = "key_group_range") -> KeyGroupRange:
    """A handle's non-empty ``[start, end]`` key-group range."""
    pair = data.array(key, 2)
    start = pair.integer(0, 0, UPPER_BOUND_MAX_PARALLELISM - 1)
    end = pair.integer(1, start, UPPER_BOUND_MAX_PARALLELISM - 1)
    return KeyGroupRange(start, end)


def read_checksum(data: JsonObject | JsonArray, key: str | int) -> str:
    value = data.text(key)
    if not _CHECKSUM.match(value):
        malformed(data.path_of(key), "must be a checksum (16 lowercase hex digits, or sha256: and 64)", value)
    return value


def check_relative_path(where: str, path: str, inside: str, file_name: bool = False) -> None:
    """Refuse (``CorruptStateError`` naming ``where``) a path from metadata that would not stay
    inside ``inside`` once joined to it (``spi.names.relative_path_problem``): every name a handle
    gives that becomes a path of the storage or of this machine is checked with it."""
    problem = relative_path_problem(path, file_name)
    if problem is not None:
        kind = "a file name" if file_name else "a normalized relative path"
        malformed(where, f"must be {kind} inside {inside} ({problem})", path)


def read_serializer_snapshot(data: JsonObject, key: str) -> dict[str, Any]:
    """A serializer snapshot's JSON, checked (``SerializerSnapshot.from_json`` reads it)."""
    return SerializerSnapshot.from_json(data.object(key)).to_json()


# ---------------------------------------------------------------------------- byte streams


class StreamStateHandle(StateHandle):
    size: int
    checksum: str

    def stream_handles(self) -> Iterator["StreamStateHandle"]:
        yield self

    @property
    def stored_as(self) -> str | None:
        """The name of the stored object holding the bytes (a file's path relative to its root, a
        row's key, ...), unique within the job; None when the handle carries its bytes itself.
        A storage's ``dispose(keep=...)`` receives these names."""
        return None


@register_handle("file")
@dataclass(frozen=True)
class FileStateHandle(StreamStateHandle):
    """A file under the storage root; ``path`` is relative to that root (POSIX separators)."""

    path: str
    size: int
    checksum: str

    @property
    def stored_as(self) -> str:
        return self.path

    def _fields_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "checksum": self.checksum}

    @classmethod
    def _from_fields(cls, data: JsonObject) -> "FileStateHandle":
        data.expect_fields(("type", "path", "size", "checksum"))
        path = data.text("path")
        check_relative_path(data.path_of("path"), path, "the checkpoint root")
        return cls(path, data.integer("size", 0), read_checksum(data, "checksum"))


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
    def _from_fields(cls, data: JsonObject) -> "InlineStateHandle":
        data.expect_fields(("type", "data"), ("checksum",))
        try:
            handle = cls(base64.b64decode(data.text("data", non_empty=False), validate=True))
        except binascii.Error as exc:
            malformed(data.path_of("data"), f"must be base64 ({exc})", show_value=False)
        if data.has("checksum"):  # kept as recorded, of its kind (``cryptographic_checksums``)
            recorded = read_checksum(data, "checksum")
            hasher = StreamChecksum.for_checksum(recorded)
            hasher.update(handle.data)
            if hasher.hexdigest() != recorded:
                raise CorruptStateError(f"field {data.path_of('data')}: the inline state bytes do not match "
                                        f"their recorded checksum {recorded} (they have {hasher.hexdigest()})")
            object.__setattr__(handle, "checksum", recorded)
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
    def from_json(cls, data: JsonArray, first: int = 0) -> "ByteRange":
        """From ``[offset, length, checksum]`` at index ``first`` of ``data``."""
        return cls(data.integer(first, 0), data.integer(first + 1, 0), read_checksum(data, first + 2))


def check_byte_ranges(path: str, ranges: list[tuple[str, ByteRange]], stream: "StreamStateHandle") -> None:
    """Byte ranges (in the order they were written) lie inside their stream and do not overlap."""
    previous_end, previous = 0, None
    for name, byte_range in ranges:
        if byte_range.end > stream.size:
            malformed(path, f"gives {name} bytes [{byte_range.offset}, {byte_range.end}), beyond the "
                            f"{stream.size} bytes of its stream", show_value=False)
        if byte_range.offset < previous_end:
            malformed(path, f"gives {name} bytes from offset {byte_range.offset}, inside those of {previous} "
                            f"(which end at {previous_end}); they are written in order without overlap",
                      show_value=False)
        previous_end, previous = byte_range.end, name


def key_group_index_json(key_groups: dict[int, ByteRange]) -> list[list[Any]]:
    """The byte range of every key group in a stream, as ``[[key group, offset, length, checksum], ...]``."""
    return [[kg, *r.to_json()] for kg, r in sorted(key_groups.items())]


def read_key_group_index(data: JsonObject, key: str, key_group_range: KeyGroupRange,
                         stream: "StreamStateHandle") -> dict[int, ByteRange]:
    """The index ``key_group_index_json`` wrote: key groups inside the handle's range, ascending,
    once each, their byte ranges inside ``stream`` and apart."""
    index = data.array(key)
    key_groups: dict[int, ByteRange] = {}
    previous = -1
    for entry in index.arrays(4):
        key_group = entry.integer(0)
        if key_group not in key_group_range:
            malformed(entry.path_of(0), f"is key group {key_group}, outside the handle's key-group range "
                                        f"{key_group_range}", show_value=False)
        if key_group <= previous:
            problem = "appears twice" if key_group in key_groups else "is out of order"
            malformed(entry.path_of(0), f"is key group {key_group}, which {problem} in the index (key groups "
                                        f"are listed once each, in ascending order)", show_value=False)
        key_groups[key_group] = ByteRange.from_json(entry, first=1)
        previous = key_group
    check_byte_ranges(index.path, [(f"key group {kg}", r) for kg, r in key_groups.items()], stream)
    return key_groups


@dataclass(frozen=True)
class StateMetaInfo:
    """What a snapshot records of one state: its kind, the serializers that wrote it, its TTL and
    the time its TTL runs on. The time is in the JSON only when it is event time: a state recorded
    without it (every checkpoint written before event-time TTL existed) runs on processing time."""

    name: str
    kind: str
    serializers: dict[str, Any]  # role -> SerializerSnapshot JSON
    ttl_seconds: float | None = None
    ttl_time: TtlTimeCharacteristic = TtlTimeCharacteristic.PROCESSING_TIME

    def to_json(self) -> dict[str, Any]:
        data = {"name": self.name, "kind": self.kind, "serializers": self.serializers,
                "ttl_seconds": self.ttl_seconds}
        if self.ttl_time is not TtlTimeCharacteristic.PROCESSING_TIME:
            data["ttl_time"] = self.ttl_time.value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StateMetaInfo":
        obj = as_object(data).expect_fields(("name", "kind", "serializers"), ("ttl_seconds", "ttl_time"))
        kind = obj.text("kind")
        if kind not in {k.value for k in StateKind}:
            malformed(obj.path_of("kind"), f"must be one of {[k.value for k in StateKind]}", kind)
        ttl_time = obj.text("ttl_time") if obj.has("ttl_time") else TtlTimeCharacteristic.PROCESSING_TIME.value
        if ttl_time not in {t.value for t in TtlTimeCharacteristic}:
            malformed(obj.path_of("ttl_time"), f"must be one of {[t.value for t in TtlTimeCharacteristic]}", ttl_time)
        serializers = obj.object("serializers")
        return cls(obj.text("name"), kind, {role: read_serializer_snapshot(serializers, role) for role in serializers},
                   obj.number("ttl_seconds", 0) if obj.has("ttl_seconds") else None, TtlTimeCharacteristic(ttl_time))


class KeyedStateHandle(StateHandle):
    """State of one key-group range of one subtask."""

    key_group_range: KeyGroupRange

    def restore_key_groups(self, target: KeyGroupRange) -> KeyGroupRange:
        return self.key_group_range.intersection(target)

    def key_serializer_snapshot(self) -> dict[str, Any] | None:
        """The snapshot (``SerializerSnapshot`` JSON) of the key serializer the state was written
        with, its config holding the key format too; None when the handle does not record it.
        Savepoints and inspection read it with ``spi.key_format.read_key_serializer``."""
        return None

    def state_meta_infos(self) -> tuple["StateMetaInfo", ...]:
        """The states the handle holds (name, kind, serializers); empty when it does not record them."""
        return ()


class RecordedStates(KeyedStateHandle):
    """A keyed handle that records its key serializer and states in fields of these names."""

    key_serializer: dict[str, Any]
    states: tuple["StateMetaInfo", ...]

    def key_serializer_snapshot(self) -> dict[str, Any]:
        return self.key_serializer

    def state_meta_infos(self) -> tuple["StateMetaInfo", ...]:
        return self.states


#: the newest revision of the canonical format this release reads and writes (``KeyGroupsStateHandle``)
KEY_GROUPS_FORMAT_VERSION = 2


@register_handle("key-groups")
@dataclass(frozen=True)
class KeyGroupsStateHandle(RecordedStates):
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
    #: the format's revision: 1 holds the five state kinds, 2 adds timers (``KEY_GROUPS_FORMAT_VERSION``);
    #: a snapshot is written with the lowest version that holds its states, so older readers read it
    format_version: int = 1

    def stream_handles(self) -> Iterator[StreamStateHandle]:
        yield self.stream

    def _fields_json(self) -> dict[str, Any]:
        return {
            "key_group_range": self.key_group_range.to_json(),
            "stream": self.stream.to_json(),
            "key_groups": key_group_index_json(self.key_groups),
            "key_serializer": self.key_serializer,
            "states": [s.to_json() for s in self.states],
            "format": self.format,
            **({"format_version": self.format_version} if self.format_version > 1 else {}),
        }

    @classmethod
    def _from_fields(cls, data: JsonObject) -> "KeyGroupsStateHandle":
        data.expect_fields(("type", "key_group_range", "stream", "key_groups", "key_serializer", "states"),
                           ("format", "format_version"))
        version = data.integer("format_version") if data.has("format_version") else 1
        if not 1 <= version <= KEY_GROUPS_FORMAT_VERSION:
            malformed(data.path_of("format_version"), f"is version {version} of the canonical format; this statekit "
                      f"reads versions 1 to {KEY_GROUPS_FORMAT_VERSION}: restore with the statekit release that "
                      f"wrote the snapshot, or a newer one", show_value=False)
        key_group_range = read_key_group_range(data)
        stream = nested_handle(data, "stream", StreamStateHandle)
        key_groups = read_key_group_index(data, "key_groups", key_group_range, stream)
        return cls(key_group_range, stream, key_groups, read_serializer_snapshot(data, "key_serializer"),
                   tuple(StateMetaInfo.from_json(s) for s in data.array("states").objects()),
                   data.text("format") if data.has("format") else "canonical-arrow-v1", version)


# ---------------------------------------------------------------------------- operator state


class OperatorStateMode:
    SPLIT_DISTRIBUTE = "split"  # list state: elements are split round-robin on rescale
    UNION = "union"  # union list state: every subtask gets every element
    BROADCAST = "broadcast"  # broadcast map: identical on every subtask, copied on rescale
    ALL = (SPLIT_DISTRIBUTE, UNION, BROADCAST)


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
    def _from_fields(cls, data: JsonObject) -> "OperatorStateHandle":
        data.expect_fields(("type", "stream", "states", "serializers"))
        stream = nested_handle(data, "stream", StreamStateHandle)
        states_json, serializers_json = data.object("states"), data.object("serializers")
        states: dict[str, tuple[str, ByteRange]] = {}
        for name in states_json:
            entry = states_json.array(name, 2)
            mode = entry.text(0)
            if mode not in OperatorStateMode.ALL:
                malformed(entry.path_of(0), f"must be one of {list(OperatorStateMode.ALL)}", mode)
            states[name] = (mode, ByteRange.from_json(entry.array(1, 3)))
        if set(serializers_json) != set(states):
            malformed(serializers_json.path, f"must name the serializers of exactly the states in "
                                             f"{states_json.path} ({sorted(states)})", sorted(serializers_json))
        serializers = {name: {role: read_serializer_snapshot(roles, role) for role in roles}
                       for name, roles in serializers_json.objects()}
        check_byte_ranges(states_json.path, sorted(((f"state {n!r}", r) for n, (_, r) in states.items()),
                                                   key=lambda item: item[1].offset), stream)
        return cls(stream, states, serializers)
