"""Registering a state by descriptor: one place for the checks every backend makes.

A state is known either from a descriptor the job registered now, or from a snapshot it was
restored from (then only its ``StateMetaInfo`` is known until the job registers it again).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from statekit.serializers import declared_serializers, resolve
from statekit.spi.descriptors import StateDescriptor, StateKind, TtlTimeCharacteristic
from statekit.spi.errors import CapabilityError, IncompatibleSerializerError, StateAccessError
from statekit.spi.handles import StateMetaInfo
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer, check_compatibility


@dataclass
class RegisteredState:
    """A state's kind and serializers by role (``value``, ``user_key``, ``namespace``)."""

    name: str
    kind: StateKind
    serializers: dict[str, TypeSerializer]
    descriptor: StateDescriptor | None = None  # None while only restored, not yet registered
    ttl_seconds: float | None = None
    #: the time the TTL runs on (processing time also for a state without TTL)
    ttl_time: TtlTimeCharacteristic = TtlTimeCharacteristic.PROCESSING_TIME
    #: the value serializer of the restored state, when its values must be migrated to this one's
    #: (another serializer, or TTL turned on or off: ``migration.value_migration``)
    migrated_from: TypeSerializer | None = None
    #: the restored state's record while it is migrated (its TTL says which entries are dropped)
    migrated_meta: StateMetaInfo | None = None

    @classmethod
    def from_meta(cls, meta: StateMetaInfo) -> "RegisteredState":
        """A restored state, with the serializers that wrote it recreated from their snapshots."""
        serializers = {role: SerializerSnapshot.from_json(snap).restore_serializer()
                       for role, snap in meta.serializers.items()}
        return cls(meta.name, StateKind(meta.kind), serializers, ttl_seconds=meta.ttl_seconds, ttl_time=meta.ttl_time)

    def meta(self) -> StateMetaInfo:
        return StateMetaInfo(self.name, self.kind.value,
                             {role: s.snapshot().to_json() for role, s in sorted(self.serializers.items())},
                             self.ttl_seconds, self.ttl_time)

    @property
    def value_serializer(self) -> TypeSerializer:
        return self.serializers["value"]

    @property
    def user_key_serializer(self) -> TypeSerializer:
        return self.serializers["user_key"]

    @property
    def namespace_serializer(self) -> TypeSerializer:
        return self.serializers["namespace"]


def register(existing: RegisteredState | None, descriptor: StateDescriptor,
             namespace_serializer: TypeSerializer | None, supports_ttl: bool,
             backend_name: str, supports_event_time_ttl: bool = False) -> RegisteredState:
    """Validate ``descriptor`` against what is known of its state and return the registration.

    Raises ``StateAccessError`` for a kind mismatch, ``IncompatibleSerializerError`` when a
    restored state cannot be read by the new serializers or its TTL runs on the other time,
    ``CapabilityError`` for TTL (or event-time TTL) on a backend that does not support it.
    """
    _check_ttl_supported(descriptor, supports_ttl, supports_event_time_ttl, backend_name)
    declared = declared_serializers(descriptor)
    declared["namespace"] = namespace_serializer
    serializers = {role: resolve(s if s is not None else _undeclared(existing, role)) for role, s in declared.items()}
    ttl_seconds = descriptor.ttl.ttl_seconds if descriptor.ttl is not None else None
    ttl_time = descriptor.ttl.time_characteristic if descriptor.ttl is not None \
        else TtlTimeCharacteristic.PROCESSING_TIME
    if existing is None:
        return RegisteredState(descriptor.name, descriptor.kind, serializers, descriptor, ttl_seconds, ttl_time)
    if existing.kind is not descriptor.kind:
        raise StateAccessError(
            f"state {descriptor.name!r} is a {existing.kind.value} state and cannot be registered "
            f"as a {descriptor.kind.value} state; use another name")
    ttl_time_changed = existing.ttl_seconds is not None and ttl_seconds is not None and existing.ttl_time is not ttl_time
    if existing.descriptor is not None:
        if ttl_time_changed:
            raise StateAccessError(
                f"state {descriptor.name!r} is already registered with {existing.ttl_time.value} TTL and cannot be "
                f"registered with {ttl_time.value} TTL as well; give every descriptor of the state the same "
                f"time_characteristic")
        if existing.descriptor != descriptor and serializers_differ(existing.serializers, serializers):
            if (existing.ttl_seconds is None) != (ttl_seconds is None):
                had, has = ("without", "with") if existing.ttl_seconds is None else ("with", "without")
                raise StateAccessError(
                    f"state {descriptor.name!r} is already registered {had} TTL and cannot be registered {has} TTL "
                    f"as well; give every descriptor of the state the same TTL setting")
            raise StateAccessError(
                f"state {descriptor.name!r} is already registered with other serializers "
                f"({existing.serializers}); register it once per name")
        return existing
    if ttl_time_changed:
        raise IncompatibleSerializerError(
            f"state {descriptor.name!r} was checkpointed with {existing.ttl_time.value} TTL and is registered with "
            f"{ttl_time.value} TTL: its entries' write times are {existing.ttl_time.value} timestamps, which the "
            f"other clock cannot expire. Keep time_characteristic=TtlTimeCharacteristic.{existing.ttl_time.name}, "
            f"or register the state under a new name to start it afresh")
    ttl_switched = (existing.ttl_seconds is None) != (ttl_seconds is None)
    migrated_from = existing.value_serializer if ttl_switched else None
    for role, new in serializers.items():
        previous = existing.serializers.get(role)
        if previous is None:
            continue
        if role == "value" and ttl_switched:  # the values' own serializers, without TTL's timestamp around them
            new = new.inner if ttl_seconds is not None else new  # type: ignore[attr-defined]
            previous = previous.inner if existing.ttl_seconds is not None else previous  # type: ignore[attr-defined]
        if check_compatibility(descriptor.name, role.replace("_", " "), new, previous.snapshot(),
                               may_migrate=role == "value") is Compatibility.COMPATIBLE_AFTER_MIGRATION:
            migrated_from = existing.serializers[role]
    return RegisteredState(descriptor.name, descriptor.kind, serializers, descriptor, ttl_seconds, ttl_time,
                           migrated_from, existing.meta() if migrated_from is not None else None)


def _check_ttl_supported(descriptor: StateDescriptor, supports_ttl: bool, supports_event_time_ttl: bool,
                         backend_name: str) -> None:
    """A ``CapabilityError`` for a TTL the backend does not declare."""
    if descriptor.ttl is None:
        return
    if not supports_ttl:
        raise CapabilityError(
            f"state {descriptor.name!r} asks for TTL, which the {backend_name} backend does not "
            f"support; remove the TTL config or choose a backend that declares the 'ttl' capability")
    if descriptor.ttl.event_time and not supports_event_time_ttl:
        raise CapabilityError(
            f"state {descriptor.name!r} asks for event-time TTL, which the {backend_name} backend does not "
            f"support; use processing-time TTL (the default time_characteristic) or choose a backend that "
            f"declares the 'event_time_ttl' capability")


def _undeclared(existing: RegisteredState | None, role: str) -> TypeSerializer | None:
    """The serializer of a role the job does not declare: a restored state's namespaces and map
    keys stay as they were written (they are never migrated); values get the default, to which a
    schemaless serializer's values migrate."""
    if role == "value" or existing is None:
        return None
    return existing.serializers.get(role)


def serializers_differ(a: dict[str, TypeSerializer], b: dict[str, TypeSerializer]) -> bool:
    """Whether two states' serializers by role write differently (their snapshots differ)."""
    return {r: s.snapshot() for r, s in a.items()} != {r: s.snapshot() for r, s in b.items()}


def checked_list_elements(values: Iterable[Any] | None, adding: bool = False) -> list[Any]:
    """The elements of a list-state write (``None``: none, for ``update``; for ``add_all``, with
    ``adding``, an error, as Flink's "List of values to add is null"); a ``None`` element fails the
    whole write. ``values`` is never tested for truth: a numpy array has none."""
    if values is None and adding:
        raise StateAccessError("ListState.add_all(None): the values to add are None, not an iterable; nothing was "
                               "changed. Pass an iterable (an empty one adds nothing), or update(None) to clear")
    elements = [] if values is None else list(values)
    if any(v is None for v in elements):
        raise StateAccessError("list state elements cannot be None; nothing was changed")
    return elements


def default_value(descriptor: StateDescriptor | None) -> Any:
    return getattr(descriptor, "default", None)
