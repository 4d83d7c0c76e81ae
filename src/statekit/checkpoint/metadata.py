"""The ``_metadata`` of a completed checkpoint or savepoint: versioned JSON.

It records, per operator, the parallelism and max parallelism, the key serializer, every
state's kind and serializer snapshots, and every subtask's handles.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from statekit.spi.errors import CorruptStateError, RestoreError
from statekit.spi.handles import KeyedStateHandle, OperatorStateHandle, StateHandle, StateMetaInfo

FORMAT_VERSION = 1
MAGIC = "statekit-checkpoint"


@dataclass(frozen=True)
class SubtaskState:
    """What one subtask acknowledged for a checkpoint."""

    keyed: tuple[KeyedStateHandle, ...] = ()
    operator: OperatorStateHandle | None = None

    def to_json(self) -> dict[str, Any]:
        return {"keyed": [h.to_json() for h in self.keyed],
                "operator": self.operator.to_json() if self.operator else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SubtaskState":
        keyed = tuple(StateHandle.from_json(h) for h in data.get("keyed", ()))
        operator = StateHandle.from_json(data["operator"]) if data.get("operator") else None
        return cls(keyed, operator)  # type: ignore[arg-type]

    @property
    def state_size(self) -> int:
        return sum(h.state_size for h in self.keyed) + (self.operator.state_size if self.operator else 0)


@dataclass(frozen=True)
class OperatorState:
    operator_id: str
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskState, ...]

    def states(self) -> dict[str, StateMetaInfo]:
        """Every keyed state recorded by any subtask, by name."""
        found: dict[str, StateMetaInfo] = {}
        for subtask in self.subtasks:
            for handle in subtask.keyed:
                for meta in getattr(handle, "states", ()):
                    found.setdefault(meta.name, meta)
        return found

    def to_json(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "parallelism": self.parallelism,
                "max_parallelism": self.max_parallelism,
                "states": [m.to_json() for m in self.states().values()],
                "subtasks": [s.to_json() for s in self.subtasks]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "OperatorState":
        return cls(data["operator_id"], int(data["parallelism"]), int(data["max_parallelism"]),
                   tuple(SubtaskState.from_json(s) for s in data["subtasks"]))


@dataclass(frozen=True)
class CheckpointMetadata:
    checkpoint_id: int
    job_id: str
    operators: dict[str, OperatorState]
    is_savepoint: bool = False
    timestamp: float = field(default_factory=time.time)
    properties: dict[str, Any] = field(default_factory=dict)

    def operator(self, operator_id: str) -> OperatorState:
        try:
            return self.operators[operator_id]
        except KeyError:
            raise RestoreError(
                f"checkpoint {self.checkpoint_id} has no state for operator {operator_id!r} (it has "
                f"{sorted(self.operators)}); was the operator renamed?") from None

    def to_bytes(self) -> bytes:
        doc = {"magic": MAGIC, "version": FORMAT_VERSION, "checkpoint_id": self.checkpoint_id,
               "job_id": self.job_id, "is_savepoint": self.is_savepoint, "timestamp": self.timestamp,
               "properties": self.properties,
               "operators": [op.to_json() for _, op in sorted(self.operators.items())]}
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "checkpoint metadata") -> "CheckpointMetadata":
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptStateError(f"{source} is not valid metadata JSON: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("magic") != MAGIC:
            raise CorruptStateError(f"{source} is not a statekit checkpoint metadata file")
        if doc.get("version") != FORMAT_VERSION:
            raise RestoreError(f"{source} has metadata format version {doc.get('version')}; this statekit "
                               f"reads version {FORMAT_VERSION}. Use the statekit version that wrote it.")
        operators = {op["operator_id"]: OperatorState.from_json(op) for op in doc["operators"]}
        return cls(int(doc["checkpoint_id"]), doc["job_id"], operators, bool(doc["is_savepoint"]),
                   float(doc["timestamp"]), dict(doc.get("properties") or {}))
