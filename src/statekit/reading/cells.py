"""State cells as a reader sees them: the rows of the canonical format, decoded.

A canonical row is (state, key, namespace, user key, value) as bytes (see
``backends.common.canonical``). ``CellDecoder`` turns the rows of one keyed snapshot into
``StateCell``s with the serializers the snapshot records: the key by the key serializer, the
namespace, user key and value by the state's own, a TTL entry's write time split off its value,
and a timer's timestamp read from its user key. A value whose serializer cannot be restored here
(a class this process cannot import) or whose bytes do not decode keeps its bytes, with the
reason in ``error``: reading state never fails on one bad value.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pyarrow as pa

from statekit.backends.common.key_layout import timestamp_of_bytes
from statekit.backends.common.namespaces import VOID_NAMESPACE_BYTES
from statekit.backends.common.ttl import TIMESTAMP, TtlSerializer
from statekit.spi.descriptors import StateKind
from statekit.spi.handles import StateMetaInfo
from statekit.spi.key_format import read_key_serializer
from statekit.spi.serializer import SerializerSnapshot, TypeSerializer
from statekit.spi.state import VOID_NAMESPACE


@dataclass(frozen=True)
class StateCell:
    """One entry of keyed state: a value, one list element, one map entry, or one timer."""

    key_group: int
    state: str
    kind: str
    key: Any
    namespace: Any
    #: the map key of a map entry, the timestamp of a timer, else None
    user_key: Any
    #: the value (a list element, a map value, an accumulator); None for a timer
    value: Any
    #: the value's stored bytes (without a TTL write time); None for a timer
    value_bytes: bytes | None
    #: when a TTL entry was written (epoch ms); None without TTL
    ttl_timestamp: int | None = None
    #: why a part of the cell could not be decoded (its bytes are in ``value_bytes``), else None
    error: str | None = None
    #: the namespace's stored bytes, which are its identity: namespaces equal in Python (``1`` and
    #: ``1.0``) may be two, namespaces unequal in Python (two NaNs) one
    namespace_bytes: bytes = VOID_NAMESPACE_BYTES


class _Undecodable:
    """A serializer this process cannot restore: every value keeps its bytes and the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def deserialize(self, data: bytes) -> Any:
        raise ValueError(self.reason)


def restored_serializer(snapshot: Any, *, of_keys: bool = False) -> TypeSerializer | _Undecodable:
    """The serializer of ``snapshot`` (``of_keys``: a keyed state handle's key serializer, which records
    the key format too: the key bytes of every format decode alike)."""
    try:
        parsed = read_key_serializer(snapshot)[0] if of_keys else SerializerSnapshot.from_json(snapshot)
        serializer = parsed.restore_serializer()
    except Exception as exc:  # noqa: BLE001 - any failure to import or build it: keep the bytes
        return _Undecodable(f"its serializer cannot be restored here ({type(exc).__name__}: {exc})")
    return serializer.inner if isinstance(serializer, TtlSerializer) else serializer


class _StateDecoder:
    def __init__(self, meta: StateMetaInfo) -> None:
        self.name, self.kind, self.ttl = meta.name, meta.kind, meta.ttl_seconds is not None
        self.value = restored_serializer(meta.serializers["value"]) if "value" in meta.serializers else None
        self.user_key = restored_serializer(meta.serializers["user_key"]) if "user_key" in meta.serializers else None
        self.namespace = restored_serializer(meta.serializers["namespace"]) if "namespace" in meta.serializers else None


class CellDecoder:
    """Decodes canonical record batches of one snapshot (its key serializer and states)."""

    def __init__(self, key_serializer: Any, states: Sequence[StateMetaInfo]) -> None:
        self._key = restored_serializer(key_serializer, of_keys=True)
        self._states = {meta.name: _StateDecoder(meta) for meta in states}

    def cells(self, key_group: int, batch: pa.RecordBatch) -> Iterator[StateCell]:
        """The cells of ``batch`` (rows of ``key_group``)."""
        columns = batch.to_pydict()
        decoded_keys: dict[bytes, tuple[Any, str | None]] = {}
        for state, key, namespace, user_key, value in zip(columns["state"], columns["key"], columns["namespace"],
                                                          columns["user_key"], columns["value"]):
            decoder = self._states.get(state)
            if decoder is None:
                continue  # rows of a state the snapshot does not declare are never written
            if key not in decoded_keys:
                decoded_keys[key] = _decoded(self._key, key, "key")
            yield _cell(decoder, key_group, decoded_keys[key], namespace, user_key, value)


def _cell(decoder: _StateDecoder, key_group: int, key: tuple[Any, str | None], namespace: bytes,
          user_key: bytes | None, value: bytes) -> StateCell:
    errors = [key[1]]
    decoded_namespace, error = _decoded(decoder.namespace, namespace, "namespace") if namespace != VOID_NAMESPACE_BYTES \
        else (VOID_NAMESPACE, None)
    errors.append(error)
    if decoder.kind == StateKind.TIMERS.value:
        return StateCell(key_group, decoder.name, decoder.kind, key[0], decoded_namespace,
                         timestamp_of_bytes(user_key) if user_key is not None else None, None, None, None,
                         _joined(errors), namespace)
    decoded_user_key = None
    if user_key is not None:
        decoded_user_key, error = _decoded(decoder.user_key, user_key, "map key")
        errors.append(error)
    ttl_timestamp = None
    if decoder.ttl:
        ttl_timestamp = TIMESTAMP.unpack_from(value)[0]
        value = value[TIMESTAMP.size:]
    decoded_value, error = _decoded(decoder.value, value, "value")
    errors.append(error)
    return StateCell(key_group, decoder.name, decoder.kind, key[0], decoded_namespace, decoded_user_key,
                     decoded_value, value, ttl_timestamp, _joined(errors), namespace)


def _decoded(serializer: Any, data: bytes, what: str) -> tuple[Any, str | None]:
    if serializer is None:
        return None, None
    try:
        return serializer.deserialize(data), None
    except Exception as exc:  # noqa: BLE001 - a value that does not decode keeps its bytes
        reason = serializer.reason if isinstance(serializer, _Undecodable) else f"{type(exc).__name__}: {exc}"
        return None, f"{what} not decoded: {reason}"


def _joined(errors: list[str | None]) -> str | None:
    found = [e for e in errors if e]
    return "; ".join(found) if found else None


def readable(value: Any) -> str | None:
    """A value as text: JSON where it is JSON (tuples become arrays), else its ``repr``."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return repr(value)
