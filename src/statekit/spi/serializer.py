"""The serializer contract: bytes in, bytes out, plus a snapshot that travels with checkpoints.

A serializer's *snapshot* (identity, version, config) is stored in checkpoint metadata. On
restore, the serializer registered by the job is asked whether it can read what the snapshot's
serializer wrote, or migrate it (Flink's ``TypeSerializerSnapshot`` model: compatible as is,
after migration, or incompatible).

A serializer whose reading can run code (``RUNS_CODE_ON_READ``: pickle) is recreated from a
checkpoint only inside ``trusting(True)``: whoever can write a checkpoint could otherwise run
code wherever it is restored. The restore paths open that scope from the job's trust setting or
a verified signature; everything else refuses such a checkpoint before reading a byte of its state.
"""
from __future__ import annotations

import contextlib
import contextvars
import enum
import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import (
    TYPE_CHECKING, Any, Callable, ClassVar, Generic, Iterable, Iterator, Mapping, Sequence, TypeVar,
)

T = TypeVar("T")

from statekit.spi.errors import IncompatibleSerializerError, RestoreError, UntrustedCheckpointError
from statekit.spi.json_fields import as_object, malformed, plain

if TYPE_CHECKING:
    import pyarrow as pa  # imported where used: the contracts load no pyarrow


#: the setting that tells a job to trust its checkpoints' code-running state (``trusting``)
TRUST_SETTING = "spark.statekit.restore.trust-pickle"
_trusted: contextvars.ContextVar[bool] = contextvars.ContextVar("statekit_trusted_checkpoint", default=False)


@contextlib.contextmanager
def trusting(trusted: bool) -> Iterator[None]:
    """With ``trusted``, checkpoints read within this scope (of this thread or task) are trusted
    with state that runs code when read; without, the scope trusts as the enclosing one does.
    Outside every trusting scope nothing is trusted."""
    token = _trusted.set(trusted or _trusted.get())
    try:
        yield
    finally:
        _trusted.reset(token)


def require_trust(what: str) -> None:
    """Raise ``UntrustedCheckpointError`` unless inside ``trusting(True)``; ``what`` names the
    payload (e.g. "state 'counts', written by PickleSerializer")."""
    if not _trusted.get():
        raise UntrustedCheckpointError(
            f"the checkpoint holds {what}, which runs code when it is read: whoever could write the checkpoint "
            f"directory could run code here, so nothing of it was read. If only your jobs write there, set "
            f"{TRUST_SETTING}=true (or --trust-pickle); to leave pickle, register the state with a type or "
            f"no serializer (msgpack) and restore it once, trusted: its values migrate")


class Compatibility(enum.Enum):
    """What a serializer can do with state another one wrote (Flink's ``TypeSerializerSchemaCompatibility``)."""

    #: it reads the bytes as they are
    COMPATIBLE_AS_IS = "compatible-as-is"
    #: it reads them once migrated: each value read by the previous serializer, ``migrate``d and
    #: written again (a state's values only; keys, namespaces and map keys are never migrated)
    COMPATIBLE_AFTER_MIGRATION = "compatible-after-migration"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class SerializerSnapshot:
    """What a checkpoint remembers of a serializer: enough to recreate it and to compare."""

    identity: str  # "module:QualifiedClassName"
    version: int
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "version": self.version, "config": self.config}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SerializerSnapshot":
        """Malformed data raises ``CorruptStateError`` naming the field."""
        obj = as_object(data).expect_fields(("identity", "version"), ("config",))
        identity = obj.text("identity")
        if ":" not in identity:
            malformed(obj.path_of("identity"), "must be \"module:QualifiedClassName\"", identity)
        return cls(identity, obj.integer("version", 0), plain(obj.object("config")) if obj.has("config") else {})

    @property
    def short_name(self) -> str:
        return self.identity.rpartition(":")[2]

    def restore_serializer(self) -> "TypeSerializer":
        """Recreate the serializer that wrote the snapshot (it must still be importable); one that
        runs code on read only where the checkpoint is trusted (``trusting``)."""
        target = self.serializer_class()
        if target.RUNS_CODE_ON_READ:
            require_trust(f"state written by {self.short_name}")
        try:
            return target.from_config(self.config)
        except Exception as exc:  # noqa: BLE001 - whatever the class's constructor raises
            raise RestoreError(
                f"the checkpoint's state was written with serializer {self.identity!r} (version {self.version}, "
                f"config {self.config}), which {target.__qualname__}.from_config cannot recreate now "
                f"({type(exc).__name__}: {exc}); let from_config accept the config of every earlier version") from exc

    def serializer_class(self) -> "type[TypeSerializer]":
        """The class the snapshot names, imported (no instance made)."""
        module_name, _, qualname = self.identity.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in qualname.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            raise RestoreError(
                f"the checkpoint's state was written with serializer {self.identity!r}, which cannot "
                f"be imported now ({exc}); install the package that provides it") from exc
        if not (isinstance(target, type) and issubclass(target, TypeSerializer)):
            # a checkpoint names the class; only a serializer's from_config is ever called
            raise RestoreError(f"the checkpoint names {self.identity!r} as a state's serializer, which is no "
                               f"TypeSerializer class: the checkpoint is corrupt or was edited")
        return target

    def __hash__(self) -> int:
        return hash((self.identity, self.version, repr(sorted(self.config.items()))))


class TypeSerializer(ABC, Generic[T]):
    """Turns values of type ``T`` into bytes and back.

    Implementations are small, picklable and stateless. ``VERSION`` changes whenever the byte
    format changes; ``config()`` returns the constructor arguments that affect the format.
    """

    VERSION: ClassVar[int] = 1
    #: the size of every serialized value where the type always serializes to that many bytes,
    #: else None; then ``deserialize_strided`` reads values that sit at a fixed step
    FIXED_SIZE: ClassVar[int | None] = None
    #: the exact types (no subclass) whose values this serializer writes as equal bytes exactly when
    #: they are equal in Python, and reads back as an equal value of the same type. A backend that
    #: holds values as Python objects (the heap: namespaces, map user keys) holds values of these types
    #: as themselves and every other value by its bytes, so that it tells values apart as a byte store
    #: does; a value of these types that the serializer refuses is then refused at the next snapshot.
    #: Read from the class itself (``byte_equality_types``), never inherited: a subclass may write
    #: other bytes.
    BYTE_EQUALITY_TYPES: ClassVar[frozenset[type]] = frozenset()
    #: reading bytes may run code they name (pickle): such a serializer is recreated from a
    #: checkpoint only where the checkpoint is trusted (``trusting``)
    RUNS_CODE_ON_READ: ClassVar[bool] = False
    #: writes any value of the types it takes, with no schema (pickle, msgpack): every serializer
    #: may migrate a state it wrote by writing each value it reads (``compatibility``)
    SCHEMALESS: ClassVar[bool] = False

    @abstractmethod
    def serialize(self, value: T) -> bytes: ...

    @abstractmethod
    def deserialize(self, data: bytes) -> T: ...

    def unchecked_serializer(self) -> Callable[[T], bytes]:
        """``serialize`` for hot paths that call ``serialize`` itself again when it raises (so that
        the user sees its error): returns the same bytes for every value ``serialize`` accepts, and
        may raise any exception for the others. Override where a native callable does that with
        no Python frame per value (``StringSerializer``: ``str.encode``)."""
        return self.serialize

    def serialize_many(self, values: Iterable[T]) -> list[bytes]:
        """Bulk form used by snapshot writers; override where a vectorized encoding is faster."""
        serialize = self.serialize
        return [serialize(v) for v in values]

    def serialize_arrow(self, values: Sequence[T]) -> pa.Array:
        """``serialize_many`` as a binary Arrow array, the column snapshot writers build; override
        where the bytes of many values come faster at once (no Python object per value)."""
        import pyarrow as pa

        return pa.array(self.serialize_many(values), pa.binary())

    def deserialize_many(self, datas: Iterable[bytes]) -> list[T]:
        deserialize = self.deserialize
        return [deserialize(d) for d in datas]

    def deserialize_strided(self, data: bytes, start: int, step: int) -> list[T]:
        """The values serialized at ``start``, ``start + step``, ... up to the end of ``data``
        (``FIXED_SIZE`` bytes each; list state reads its fixed-width elements this way); override
        where one unpack per value is faster."""
        size = self.FIXED_SIZE
        if size is None:
            raise TypeError(f"{type(self).__name__} has no FIXED_SIZE: its values cannot be read at a fixed step")
        return self.deserialize_many([data[p:p + size] for p in range(start, len(data), step)])

    def config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "TypeSerializer":
        return cls(**config)

    def snapshot(self) -> SerializerSnapshot:
        """The config as a checkpoint gives it back (JSON: a tuple is a list), so that a snapshot
        compares equal to the one restored from the checkpoint."""
        cls = type(self)
        return SerializerSnapshot(f"{cls.__module__}:{cls.__qualname__}", cls.VERSION, plain(self.config()))

    def resolve_compatibility(self, previous: SerializerSnapshot) -> Compatibility:
        """Can this serializer read bytes written by ``previous``? Default: same identity,
        version and config. Override to accept older versions this class still reads."""
        return Compatibility.COMPATIBLE_AS_IS if previous == self.snapshot() else Compatibility.INCOMPATIBLE

    def migrate(self, value: Any, previous: "TypeSerializer") -> T:
        """``value``, as ``previous`` read it, as a value of this serializer, for a serializer whose
        ``resolve_compatibility`` answers ``COMPATIBLE_AFTER_MIGRATION`` to ``previous``'s snapshot.
        Default: from a ``SCHEMALESS`` serializer, the value as this one writes and reads it back."""
        if previous.SCHEMALESS:
            return self.deserialize(self.serialize(value))
        raise IncompatibleSerializerError(f"{type(self).__name__} does not migrate state written by "
                                          f"{type(previous).__name__}")

    def incompatibility(self, previous: SerializerSnapshot) -> str | None:
        """Why this serializer can neither read nor migrate what ``previous`` wrote, for the error
        that refuses the restore (e.g. the field and both its types); None: no more to say."""
        return None

    def decodes_like(self, other: "TypeSerializer") -> bool:
        """Whether the values this serializer reads are the Python objects ``other`` reads from the
        same bytes. A backend that holds restored values as objects (the heap) decodes them again
        with the serializer a state is registered with where not. Default: serializers of one
        class do; ``RecordSerializer`` reads equal bytes as another class where asked to."""
        return type(self) is type(other)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeSerializer) and self.snapshot() == other.snapshot()

    def __hash__(self) -> int:
        return hash(self.snapshot())

    def __repr__(self) -> str:
        config = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({config})"


def byte_equality_types(serializer: TypeSerializer) -> frozenset[type]:
    """``BYTE_EQUALITY_TYPES`` as the serializer's own class declares it (none where it does not)."""
    return type(serializer).__dict__.get("BYTE_EQUALITY_TYPES", frozenset())


def reads_older_versions(serializer: TypeSerializer, previous: SerializerSnapshot) -> Compatibility:
    """For a serializer that reads what any earlier version of its class wrote, whatever its
    config: compatible when ``previous`` has the same identity and a version up to its own."""
    same = previous.identity == serializer.snapshot().identity and previous.version <= serializer.VERSION
    return Compatibility.COMPATIBLE_AS_IS if same else Compatibility.INCOMPATIBLE


def compatibility(new: TypeSerializer, previous: SerializerSnapshot) -> Compatibility:
    """``new.resolve_compatibility(previous)``, except that state a ``SCHEMALESS`` serializer of
    another class wrote is migrated (each value read and written again) rather than refused."""
    answer = new.resolve_compatibility(previous)
    if answer is Compatibility.INCOMPATIBLE and previous.identity != new.snapshot().identity:
        try:
            schemaless = previous.serializer_class().SCHEMALESS
        except RestoreError:
            return answer
        if schemaless:
            return Compatibility.COMPATIBLE_AFTER_MIGRATION
    return answer


def check_compatibility(state_name: str, role: str, new: TypeSerializer, previous: SerializerSnapshot,
                        may_migrate: bool = False) -> Compatibility:
    """Raise a clear error unless ``new`` can read what ``previous`` wrote (or, with
    ``may_migrate``, migrate it); returns which of the two."""
    answer = compatibility(new, previous)
    if answer is Compatibility.COMPATIBLE_AS_IS or answer is Compatibility.COMPATIBLE_AFTER_MIGRATION and may_migrate:
        return answer
    written = (f"written by {previous.identity} (version {previous.version}, config {previous.config})"
               if len(str(previous.config)) < 300 else f"written by {previous.identity} (version {previous.version})")
    if answer is Compatibility.COMPATIBLE_AFTER_MIGRATION:
        raise IncompatibleSerializerError(
            f"state {state_name!r}: the {role} serializer {new.snapshot().identity} reads the restored state, "
            f"{written}, only after migrating it, and a state's {role}s are never migrated (only its values "
            f"are): keep the {role} serializer as it was")
    reason = new.incompatibility(previous)
    raise IncompatibleSerializerError(
        f"state {state_name!r}: the {role} serializer {new.snapshot().identity} "
        f"(version {new.VERSION}) cannot read the restored state, {written}"
        + (f": {reason}" if reason else "") + ". Register the state with a serializer that reads it, or "
        f"migrate the state offline (read the savepoint with the old serializer and write a new one).")
