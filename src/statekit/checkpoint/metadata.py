"""The ``_metadata`` of a completed checkpoint or savepoint: checksummed, versioned JSON.

It records, per operator, the parallelism and max parallelism, the key serializer, every
state's kind and serializer snapshots, and every subtask's handles.

Format version 2 (written since the metadata is checksummed) is one JSON object with a fixed
prefix, so that the file is verified before any of it is parsed and stays readable with any
JSON tool (``jq .body _metadata``)::

    {"magic":"statekit-checkpoint","version":2,"checksum":"<xxh3-64 hex of BODY>","body":BODY}

``BODY`` is the document below, compact JSON with sorted keys; the checksum covers its exact
bytes. Reading checks, in order: the prefix (magic and version), the checksum of the body,
then the body against the schema (field names, types and ranges; errors give the JSON path,
e.g. ``$.operators[0].subtasks[1].keyed[0].key_group_range[1]``), then the layout of every
operator (``check_layout``). Every error names the file.

Format version 3 is version 2 signed: ``"signature":"<HMAC-SHA256 hex of BODY>"`` follows the
checksum, and every file's checksum in the body is SHA-256 (``checkpoint.signing``). A reader
with the signing secret requires it and checks it before the body is parsed; one without reads
version 3 as version 2.

Format version 1 (the first format) is the bare document plus ``"magic"`` and ``"version": 1``
at the top level, without a checksum. It is still read, so existing checkpoints and savepoints
restore: such a file gets the same schema and layout checks, only the checksum is missing. The
checksum detects damage, not tampering: whoever can write the file can recompute it; the
signature cannot be recomputed without the secret.

The document: ``checkpoint_id``, ``job_id``, ``is_savepoint``, ``timestamp``, ``properties``
(free-form) and ``operators``, each with ``operator_id``, ``parallelism``, ``max_parallelism``,
``states`` (informational) and ``subtasks``: one entry per subtask, in subtask order, with its
``keyed`` handles and its ``operator`` handle (or null).
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import xxhash

from statekit.registry import load_handle_types  # noqa: F401 - installs the loader of plugins' handle types
from statekit.checkpoint.signing import (
    SIGNING_ENV, SIGNING_SETTING, signature, signature_matches, signing_key,
    verifying_key,
)
from statekit.spi.errors import CorruptStateError, RestoreError, StatekitError, UntrustedCheckpointError
from statekit.storage.layout import METADATA_FILE
from statekit.spi.handles import KeyedStateHandle, OperatorStateHandle, StateMetaInfo, nested_handle
from statekit.spi.json_fields import JsonArray, JsonObject, as_object, malformed, plain
from statekit.spi.key_groups import UPPER_BOUND_MAX_PARALLELISM, KeyGroupRange
from statekit.spi.storage import CompletedCheckpointPointer

FORMAT_VERSION = 2
SIGNED_VERSION = 3  # version 2 with a signature (``checkpoint.signing``)
LEGACY_VERSION = 1  # no checksum; still read
MAGIC = "statekit-checkpoint"
_PREFIX = re.compile(rb'\{"magic":"' + re.escape(MAGIC.encode("ascii"))
                     + rb'","version":(\d{1,9}),"checksum":"([0-9a-f]{16})",(?:"signature":"([0-9a-f]{64})",)?"body":')
_FIX = "Restore from another checkpoint or savepoint; a _metadata file is never edited by hand"


def metadata_source(pointer: CompletedCheckpointPointer) -> str:
    """How errors name the ``_metadata`` of a completed checkpoint or savepoint."""
    return f"{pointer.external_pointer.rstrip('/')}/{METADATA_FILE}"


@dataclass(frozen=True)
class SubtaskState:
    """What one subtask acknowledged for a checkpoint."""

    keyed: tuple[KeyedStateHandle, ...] = ()
    operator: OperatorStateHandle | None = None

    def to_json(self) -> dict[str, Any]:
        return {"keyed": [h.to_json() for h in self.keyed],
                "operator": self.operator.to_json() if self.operator else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SubtaskState":
        obj = as_object(data).expect_fields((), ("keyed", "operator"))
        keyed_json = obj.array("keyed") if "keyed" in obj else JsonArray([])
        keyed = tuple(nested_handle(keyed_json, i, KeyedStateHandle) for i in range(len(keyed_json)))
        operator = nested_handle(obj, "operator", OperatorStateHandle) if obj.has("operator") else None
        return cls(keyed, operator)

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
                for meta in handle.state_meta_infos():
                    found.setdefault(meta.name, meta)
        return found

    def to_json(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "parallelism": self.parallelism,
                "max_parallelism": self.max_parallelism,
                "states": [m.to_json() for m in self.states().values()],
                "subtasks": [s.to_json() for s in self.subtasks]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "OperatorState":
        """The operator's state, checked by ``check_layout``."""
        obj = as_object(data).expect_fields(("operator_id", "parallelism", "max_parallelism", "subtasks"),
                                            ("states",))
        max_parallelism = obj.integer("max_parallelism", 1, UPPER_BOUND_MAX_PARALLELISM)
        parallelism = obj.integer("parallelism", 1, max_parallelism)
        if "states" in obj:  # informational (derived from the handles), but it must be well-formed
            for meta in obj.array("states").objects():
                StateMetaInfo.from_json(meta)
        subtasks_json = obj.array("subtasks", parallelism)
        state = cls(obj.text("operator_id"), parallelism, max_parallelism,
                    tuple(SubtaskState.from_json(s) for s in subtasks_json.objects()))
        check_layout(state, obj.path)
        return state


def check_layout(state: OperatorState, path: str = "operator") -> None:
    """The keyed handles of each subtask cover exactly the key groups the subtask owns (Flink's
    assignment of ``max_parallelism`` key groups to ``parallelism`` subtasks), so that together
    they cover ``[0, max_parallelism)`` exactly once. A subtask without keyed handles held no
    keyed state (a backend writes no handle for an empty snapshot). Index entries of a handle
    lying inside its range is checked where the handle is read."""
    for index, subtask in enumerate(state.subtasks):
        owned = KeyGroupRange.of_subtask(state.max_parallelism, state.parallelism, index)
        covered: list[KeyGroupRange] = []
        for position, handle in enumerate(subtask.keyed):
            where = f"{path}.subtasks[{index}].keyed[{position}].key_group_range"
            handle_range = handle.key_group_range
            if handle_range.intersection(owned) != handle_range:
                malformed(where, f"is {handle_range}, but subtask {index} of {state.parallelism} owns key groups "
                                 f"{owned} (max parallelism {state.max_parallelism})", show_value=False)
            for other in covered:
                if handle_range.intersects(other):
                    malformed(where, f"is {handle_range}, overlapping another handle's {other}: a key group "
                                     f"appears twice", show_value=False)
            covered.append(handle_range)
        if covered and sum(len(r) for r in covered) != len(owned):
            malformed(f"{path}.subtasks[{index}].keyed", f"covers {sorted(str(r) for r in covered)}, not all of the "
                                                         f"key groups {owned} subtask {index} owns", show_value=False)


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
        body = json.dumps({"checkpoint_id": self.checkpoint_id, "job_id": self.job_id,
                           "is_savepoint": self.is_savepoint, "timestamp": self.timestamp,
                           "properties": self.properties,
                           "operators": [op.to_json() for _, op in sorted(self.operators.items())]},
                          separators=(",", ":"), sort_keys=True).encode("utf-8")
        checksum = xxhash.xxh3_64_hexdigest(body).encode("ascii")
        key = signing_key()
        signed = b'"signature":"' + signature(key, body).encode("ascii") + b'",' if key else b""
        version = SIGNED_VERSION if key else FORMAT_VERSION
        return (b'{"magic":"' + MAGIC.encode("ascii") + b'","version":' + str(version).encode("ascii")
                + b',"checksum":"' + checksum + b'",' + signed + b'"body":' + body + b"}")

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "checkpoint metadata") -> "CheckpointMetadata":
        """Verify, validate and parse ``_metadata``; ``source`` (the file) is named in every error."""
        doc = _verified_document(data, source)
        try:
            return cls._from_document(doc)
        except CorruptStateError as exc:
            raise CorruptStateError(f"{source} is corrupt: {exc}. {_FIX}") from exc
        except StatekitError as exc:  # e.g. a handle type whose plugin is not installed
            raise type(exc)(f"{source}: {exc}") from exc

    @classmethod
    def _from_document(cls, doc: JsonObject) -> "CheckpointMetadata":
        doc.expect_fields(("checkpoint_id", "job_id", "is_savepoint", "timestamp", "operators"), ("properties",))
        operators: dict[str, OperatorState] = {}
        for operator_json in doc.array("operators").objects():
            operator = OperatorState.from_json(operator_json)
            if operator.operator_id in operators:
                malformed(operator_json.path_of("operator_id"), "repeats an operator id", operator.operator_id)
            operators[operator.operator_id] = operator
        return cls(doc.integer("checkpoint_id", 0), doc.text("job_id", non_empty=False), operators,
                   doc.boolean("is_savepoint"), doc.number("timestamp", 0),
                   plain(doc.object("properties")) if doc.has("properties") else {})


def read_metadata(data: bytes, pointer: CompletedCheckpointPointer) -> CheckpointMetadata:
    """``CheckpointMetadata.from_bytes`` of the ``_metadata`` found at ``pointer``, which must be
    the document of that place: a checkpoint directory ``<job-id>/chk-<n>`` holds the metadata of
    checkpoint ``n`` of that job (the job checked where the pointer knows it), a savepoint
    directory a savepoint's. Savepoints are relocatable and renamable, so neither their id nor
    their job is checked against their place. A ``_metadata`` copied from another checkpoint
    would restore that one's state as this one's, and the next checkpoint would reuse its id."""
    source = metadata_source(pointer)
    metadata = CheckpointMetadata.from_bytes(data, source)
    found = f"checkpoint {metadata.checkpoint_id} of job {metadata.job_id!r}"
    if metadata.is_savepoint:
        found = f"a savepoint (of checkpoint {metadata.checkpoint_id} of job {metadata.job_id!r})"
    if pointer.is_savepoint:
        if not metadata.is_savepoint:
            raise CorruptStateError(
                f"{source} is the metadata of {found}, in a savepoint directory: a checkpoint's _metadata was "
                f"copied or moved there, and its files are found only from its job's directory. Restore from "
                f"the checkpoint in its job directory, or take a savepoint of it (statekit savepoint create)")
        return metadata
    expected = f"checkpoint {pointer.checkpoint_id}" + (f" of job {pointer.job_id!r}" if pointer.job_id else "")
    if metadata.is_savepoint or metadata.checkpoint_id != pointer.checkpoint_id or (
            pointer.job_id is not None and metadata.job_id != pointer.job_id):
        raise CorruptStateError(
            f"{source} is the metadata of {found}, but its place is that of {expected}: it was copied or moved "
            f"there from another checkpoint, and would restore that one's state as this one's. Restore from "
            f"another checkpoint or savepoint (or put the file back where it was written); a _metadata file is "
            f"never copied between checkpoints")
    return metadata


def _verified_document(data: bytes, source: str) -> JsonObject:
    """The metadata document, once the envelope and the checksum (version 2) or the magic
    (version 1) were checked; its fields are checked by the caller."""
    key = verifying_key()
    match = _PREFIX.match(data)
    if match is not None and data.endswith(b"}"):
        version = int(match.group(1))
        if version > SIGNED_VERSION:
            raise RestoreError(f"{source} has metadata format version {version}; this statekit reads versions "
                               f"{LEGACY_VERSION} to {SIGNED_VERSION}. Use the statekit version that wrote it "
                               f"(if none did, the file is corrupt: {_FIX})")
        if version not in (FORMAT_VERSION, SIGNED_VERSION) or (version == SIGNED_VERSION) != bool(match.group(3)):
            raise CorruptStateError(f"{source} is corrupt: its envelope gives format version {version}, which has "
                                    f"{'a' if version == SIGNED_VERSION else 'no'} signature. {_FIX}")
        body, recorded = data[match.end():-1], match.group(2).decode("ascii")
        if key is not None:
            _check_signature(key, body, match.group(3), source)
        actual = xxhash.xxh3_64_hexdigest(body)
        if actual != recorded:
            raise CorruptStateError(f"{source} is corrupt: the checksum of its content is {actual}, the file "
                                    f"records {recorded} ({len(data)} bytes read). {_FIX}")
        return _as_document(_parse_json(body, source), source, "$.body")
    if key is not None:
        _check_signature(key, data, None, source)
    doc = _parse_json(data, source)
    if isinstance(doc, dict) and doc.get("magic") == MAGIC and doc.get("version") == LEGACY_VERSION \
            and "body" not in doc:
        return _as_document({k: v for k, v in doc.items() if k not in ("magic", "version")}, source, "$")
    if isinstance(doc, dict) and {"magic", "version", "checksum", "body"} & set(doc):
        raise CorruptStateError(f"{source} is corrupt: its statekit metadata envelope is damaged (it must begin "
                                f"with {{\"magic\":\"{MAGIC}\",\"version\":{FORMAT_VERSION},\"checksum\":...). {_FIX}")
    raise CorruptStateError(f"{source} is valid JSON but not statekit checkpoint metadata (it has no "
                            f"\"magic\": \"{MAGIC}\"): point the restore path at the _metadata of a statekit "
                            f"checkpoint or savepoint, or at its directory")


def _check_signature(key: bytes, body: bytes, recorded: bytes | None, source: str) -> None:
    """Refuse metadata the secret in force did not sign (``checkpoint.signing``)."""
    if recorded is None:
        raise UntrustedCheckpointError(
            f"{source} is not signed, and a signing secret is set ({SIGNING_SETTING} or {SIGNING_ENV}): it was "
            f"written without the secret, by another job or by hand. Restore from a checkpoint or savepoint the job "
            f"signed; to adopt this one, check it and take a signed savepoint of it (statekit savepoint create "
            f"--sign, with the secret in {SIGNING_ENV})")
    if not signature_matches(key, body, recorded.decode("ascii")):
        raise UntrustedCheckpointError(
            f"{source} does not carry this secret's signature: it was signed with another secret, or edited after "
            f"it was signed. Nothing of it was read; restore from another checkpoint or savepoint, or set the "
            f"secret that signed it")


def _parse_json(data: bytes, source: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptStateError(f"{source} is not valid metadata JSON ({exc}): it is damaged or not a statekit "
                                f"_metadata file. {_FIX}") from exc


def _as_document(doc: Any, source: str, path: str) -> JsonObject:
    if not isinstance(doc, dict):
        raise CorruptStateError(f"{source} is corrupt: {path} must be a JSON object. {_FIX}")
    return JsonObject(doc, path)
