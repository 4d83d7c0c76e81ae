"""Any picklable Python object, asked for by name (``PickleSerializer()``, ``"pickle"``).

Reading a pickle runs whatever code its bytes name: a state written with it is restored only from
a trusted or signed checkpoint (``spi.serializer.trusting``). Types that msgpack or a schema cover
need neither (the defaults: ``statekit.serializers``).
"""
from __future__ import annotations

import pickle
from typing import Any, Iterable

from statekit.spi.errors import ConfigurationError, SerializationError
from statekit.spi.serializer import Compatibility, SerializerSnapshot, TypeSerializer, reads_older_versions


class PickleSerializer(TypeSerializer[Any]):
    BYTE_EQUALITY_TYPES = frozenset({int, str, bytes})
    SCHEMALESS = True
    RUNS_CODE_ON_READ = True

    def __init__(self, protocol: int = 5) -> None:
        if not 2 <= protocol <= pickle.HIGHEST_PROTOCOL:
            raise ConfigurationError(f"pickle protocol must be in [2, {pickle.HIGHEST_PROTOCOL}], got {protocol}")
        self.protocol = protocol

    def serialize(self, value: Any) -> bytes:
        try:
            return pickle.dumps(value, self.protocol)
        except Exception as exc:  # pickle raises several unrelated types
            raise SerializationError(
                f"cannot pickle a value of type {type(value).__name__}: {exc}. Store picklable values "
                f"or give the state descriptor a serializer for this type") from exc

    def serialize_many(self, values: Iterable[Any]) -> list[bytes]:
        values = values if isinstance(values, list) else list(values)
        dumps, protocol = pickle.dumps, self.protocol
        try:
            return [dumps(value, protocol) for value in values]
        except Exception:  # the value that failed gets serialize's error message
            serialize = self.serialize
            return [serialize(value) for value in values]

    def deserialize(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise SerializationError(f"cannot unpickle {len(data)} bytes of state: {exc}") from exc

    def config(self) -> dict[str, Any]:
        return {"protocol": self.protocol}

    def resolve_compatibility(self, previous: SerializerSnapshot) -> Compatibility:
        # every protocol reads every older protocol: only the class identity matters
        return reads_older_versions(self, previous)
