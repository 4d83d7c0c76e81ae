"""Inspecting checkpoints and savepoints as data: what ``statekit checkpoints list`` and
``describe`` print and ``statekit savepoint create`` does, as functions returning the JSON
documents that ``statekit.cli`` documents (the command line only parses and prints)."""
from __future__ import annotations

import posixpath
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, read_metadata
from statekit.checkpoint.snapshot_format import FORMAT_PROPERTY
from statekit.checkpoint.store import stream_handles, subtask_stream_handles
from statekit.progress import progress
from statekit.spi.errors import CorruptStateError, StatekitError
from statekit.spi.handles import OperatorStateHandle, StreamStateHandle
from statekit.spi.key_groups import KeyGroupRange
from statekit.spi.names import check_job_id
from statekit.spi.serializer import SerializerSnapshot, trusting
from statekit.spi.storage import CheckpointStorage, CompletedCheckpointPointer, ResolvedCheckpoint
from statekit.storage.layout import CHECKPOINT_DIR_PATTERN, METADATA_FILE, SAVEPOINT_PREFIX, SHARED_DIR
from statekit.storage.urls import open_url


class InspectionError(StatekitError):
    """A problem with what was asked for (bad path, existing savepoint, ...)."""


# ---------------------------------------------------------------------------- sizes and files


@dataclass
class StreamSummary:
    """The streams a snapshot (or a part of it) references, each file once."""

    shared: dict[str, int] = field(default_factory=dict)  # relative path -> size
    exclusive: dict[str, int] = field(default_factory=dict)
    inline_count: int = 0
    inline_bytes: int = 0

    @classmethod
    def of(cls, handles: Iterable[StreamStateHandle]) -> "StreamSummary":
        summary = cls()
        for handle in handles:
            path = handle.stored_as
            if path:
                target = summary.shared if path.startswith(SHARED_DIR + "/") else summary.exclusive
                target[path] = int(handle.size)
            else:
                summary.inline_count += 1
                summary.inline_bytes += int(handle.size)
        return summary

    @property
    def files(self) -> int:
        return len(self.shared) + len(self.exclusive)

    @property
    def state_size(self) -> int:
        return sum(self.shared.values()) + sum(self.exclusive.values()) + self.inline_bytes


def iso_time(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


def _serializer(data: Any) -> dict[str, Any]:
    try:
        snapshot = SerializerSnapshot.from_json(data)
    except CorruptStateError:
        return {"class": str(data), "identity": str(data), "version": None, "config": {}}
    return {"class": snapshot.short_name, "identity": snapshot.identity, "version": snapshot.version,
            "config": snapshot.config}


# ---------------------------------------------------------------------------- checkpoints list


def _children(fs: Any, path: str) -> dict[str, str]:
    """Entry name -> type ("directory", "file", ...) of a directory."""
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return {}
    own = fs._strip_protocol(path).rstrip("/")
    found = {}
    for entry in entries:
        full = fs._strip_protocol(str(entry.get("name", ""))).rstrip("/")
        if full and full != own:  # some file systems list a directory itself
            found[posixpath.basename(full)] = str(entry.get("type", ""))
    return found


def _is_job_dir(children: dict[str, str]) -> bool:
    return any(CHECKPOINT_DIR_PATTERN.match(name) for name in children) or children.get(SHARED_DIR) == "directory"


def _entry(fs: Any, directory: str, checkpoint_id: int | None) -> dict[str, Any]:
    url = fs.unstrip_protocol(directory)
    entry: dict[str, Any] = {
        "name": posixpath.basename(directory), "path": url, "checkpoint_id": checkpoint_id,
        "status": "incomplete", "job_id": None, "timestamp": None, "time": None, "state_size": None,
        "files": None, "incremental": None, "savepoint": None, "backend": None, "error": None}
    metadata_path = posixpath.join(directory, METADATA_FILE)
    if not fs.exists(metadata_path):
        return entry
    pointer = CompletedCheckpointPointer(-1, url, is_savepoint=True) if checkpoint_id is None else \
        CompletedCheckpointPointer(checkpoint_id, url, job_id=posixpath.basename(posixpath.dirname(directory)))
    try:
        metadata = read_metadata(fs.cat_file(metadata_path), pointer)
    except (StatekitError, OSError) as exc:
        entry.update(status="corrupt", error=error_text(exc))
        return entry
    summary = StreamSummary.of(stream_handles(metadata))
    entry.update(status="completed", checkpoint_id=metadata.checkpoint_id if checkpoint_id is None else checkpoint_id,
                 job_id=metadata.job_id, timestamp=metadata.timestamp, time=iso_time(metadata.timestamp),
                 state_size=summary.state_size, files=summary.files,
                 incremental=bool(metadata.properties.get("incremental", False)),
                 savepoint=metadata.is_savepoint, backend=metadata.properties.get("backend"))
    return entry


def _job(fs: Any, directory: str, children: dict[str, str]) -> dict[str, Any]:
    ids = sorted(int(m.group(1)) for name in children if (m := CHECKPOINT_DIR_PATTERN.match(name)))
    entries = []
    with progress(f"reading job {posixpath.basename(directory)}", len(ids), unit="checkpoints") as advance:
        for i in ids:
            entries.append(_entry(fs, posixpath.join(directory, f"chk-{i}"), i))
            advance(1)
    return {"job_id": posixpath.basename(directory), "path": fs.unstrip_protocol(directory), "checkpoints": entries}


def list_checkpoints(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The document ``checkpoints list --json`` prints."""
    fs, root = open_url(url, "directory", storage_options)
    if posixpath.basename(root) == METADATA_FILE and fs.isfile(root):
        root = posixpath.dirname(root)
    if not fs.exists(root):
        raise InspectionError(f"{url!r} does not exist")
    if not fs.isdir(root):
        raise InspectionError(f"{url!r} is not a directory (give a checkpoint directory, a job directory or a "
                       f"savepoint directory)")
    jobs: list[dict[str, Any]] = []
    savepoints: list[dict[str, Any]] = []
    children = _children(fs, root)
    name = posixpath.basename(root)
    match = CHECKPOINT_DIR_PATTERN.match(name)
    if match:  # one checkpoint directory: list it within its job
        job_dir = posixpath.dirname(root)
        jobs.append({"job_id": posixpath.basename(job_dir), "path": fs.unstrip_protocol(job_dir),
                     "checkpoints": [_entry(fs, root, int(match.group(1)))]})
    elif METADATA_FILE in children:  # one savepoint directory
        savepoints.append(_entry(fs, root, None))
    elif _is_job_dir(children):
        jobs.append(_job(fs, root, children))
    else:
        for child, kind in sorted(children.items()):
            if kind != "directory":
                continue
            path = posixpath.join(root, child)
            if child.startswith(SAVEPOINT_PREFIX):
                savepoints.append(_entry(fs, path, None))
                continue
            grandchildren = _children(fs, path)
            if _is_job_dir(grandchildren):
                jobs.append(_job(fs, path, grandchildren))
    return {"path": fs.unstrip_protocol(root), "jobs": jobs, "savepoints": savepoints}


# ---------------------------------------------------------------------------- checkpoints describe


def _operator_doc(operator: OperatorState) -> dict[str, Any]:
    key_serializer = next((snapshot for s in operator.subtasks for h in s.keyed
                           if (snapshot := h.key_serializer_snapshot())), None)
    states = [{"name": meta.name, "kind": meta.kind, "ttl_seconds": meta.ttl_seconds,
               "ttl_time": meta.ttl_time.value if meta.ttl_seconds is not None else None,
               "serializers": {role: _serializer(s) for role, s in sorted(meta.serializers.items())}}
              for _, meta in sorted(operator.states().items())]
    operator_states: dict[str, dict[str, Any]] = {}
    for subtask in operator.subtasks:
        handle = subtask.operator
        if not isinstance(handle, OperatorStateHandle):
            continue
        for name, (mode, byte_range) in handle.states.items():
            info = operator_states.setdefault(name, {
                "name": name, "mode": mode, "size": 0,
                "serializers": {role: _serializer(s) for role, s in sorted(handle.serializers.get(name, {}).items())}})
            info["size"] += byte_range.length
    subtasks = []
    for index, subtask in enumerate(operator.subtasks):
        keyed_size = sum(h.state_size for h in subtask.keyed)
        operator_size = subtask.operator.state_size if subtask.operator is not None else 0
        subtasks.append({"index": index, "key_group_range": KeyGroupRange.of_subtask(  # its handles cover exactly this range (checked on read)
                             operator.max_parallelism, operator.parallelism, index).to_json(),
                         "state_size": keyed_size + operator_size, "keyed_state_size": keyed_size,
                         "operator_state_size": operator_size})
    return {"operator_id": operator.operator_id, "parallelism": operator.parallelism,
            "max_parallelism": operator.max_parallelism,
            "state_size": StreamSummary.of(subtask_stream_handles(operator.subtasks)).state_size,
            "key_serializer": _serializer(key_serializer) if key_serializer else None,
            "states": states, "operator_states": [operator_states[n] for n in sorted(operator_states)],
            "subtasks": subtasks}


def _files_doc(files: dict[str, int]) -> dict[str, Any]:
    return {"count": len(files), "bytes": sum(files.values()),
            "files": [{"path": p, "size": s} for p, s in sorted(files.items())]}


def describe_metadata(metadata: CheckpointMetadata, url: str) -> dict[str, Any]:
    summary = StreamSummary.of(stream_handles(metadata))
    source = metadata.properties.get("source_checkpoint")
    return {
        "path": url, "checkpoint_id": metadata.checkpoint_id, "job_id": metadata.job_id,
        "savepoint": metadata.is_savepoint, "timestamp": metadata.timestamp, "time": iso_time(metadata.timestamp),
        "backend": metadata.properties.get("backend"),
        "incremental": bool(metadata.properties.get("incremental", False)),
        "format": metadata.properties.get(FORMAT_PROPERTY, "canonical"),
        "source_checkpoint": source if isinstance(source, int) else None,
        "properties": metadata.properties,
        "state_size": summary.state_size, "files": summary.files,
        "operators": [_operator_doc(op) for _, op in sorted(metadata.operators.items())],
        "shared_files": _files_doc(summary.shared), "exclusive_files": _files_doc(summary.exclusive),
        "inline": {"count": summary.inline_count, "bytes": summary.inline_bytes},
    }


def _files(url: str, storage_options: dict[str, Any] | None) -> CheckpointStorage:
    """The ``filesystem`` storage at ``url``: the tools read and write checkpoint and savepoint
    directories of file systems, through that storage's contract."""
    from statekit.registry import storage_class

    return storage_class("filesystem")(url, storage_options=storage_options)  # type: ignore[call-arg]


def resolve_checkpoint(url: str, storage_options: dict[str, Any] | None, setting: str) -> ResolvedCheckpoint:
    """The checkpoint or savepoint at ``url`` (``setting`` names the argument in errors)."""
    return _files(url, storage_options).resolve_checkpoint(url, setting)


def describe(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The document ``checkpoints describe --json`` prints."""
    resolved = resolve_checkpoint(url, storage_options, "path")
    metadata = read_metadata(resolved.metadata, resolved.pointer)
    return describe_metadata(metadata, resolved.pointer.external_pointer)


# ---------------------------------------------------------------------------- savepoint create


def create_savepoint(source_url: str, savepoint_dir: str, backend_name: str | None = None,
                     storage_options: dict[str, Any] | None = None, trust_pickle: bool = False) -> dict[str, Any]:
    """Convert a completed checkpoint to a canonical savepoint; the document ``--json`` prints.
    ``trust_pickle``: restore state that runs code when read (pickle) from it."""
    from statekit.registry import backend_class
    from statekit.runtime.savepoints import write_savepoint

    resolved = resolve_checkpoint(source_url, storage_options, "--from")
    metadata = read_metadata(resolved.metadata, resolved.pointer)
    name = backend_name or metadata.properties.get("backend") or "heap"
    cls = backend_class(name, setting="--backend")
    try:
        state_backend = cls()
    except StatekitError:
        raise
    except Exception as exc:
        raise InspectionError(f"--backend={name!r}: {cls.__name__}() cannot be created: {exc}") from exc
    check_job_id(metadata.job_id, f"the job id in {resolved.pointer.external_pointer}/{METADATA_FILE}")
    savepoint_id = f"{metadata.job_id}-{metadata.checkpoint_id}"
    # refuses an existing savepoint before writing anything
    location = _files(savepoint_dir, storage_options).savepoint_location(savepoint_dir, savepoint_id)
    with tempfile.TemporaryDirectory(prefix="statekit-savepoint-") as local_dir, trusting(trust_pickle):
        savepoint, pointer = write_savepoint(location, metadata, resolved.streams, state_backend, local_dir)
    summary = StreamSummary.of(stream_handles(savepoint))
    return {"path": pointer.external_pointer, "job_id": savepoint.job_id, "checkpoint_id": savepoint.checkpoint_id,
            "source": resolved.pointer.external_pointer, "backend": name, "state_size": summary.state_size,
            "files": summary.files}


def rewrite_savepoint(source_url: str, savepoint_dir: str, savepoint_id: str, rename: dict[str, str],
                      drop: frozenset[str], operator_id: str | None = None,
                      storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A new savepoint of a savepoint's states, renamed and dropped (``runtime.rewrite``: no value
    is deserialized); the document ``--json`` prints."""
    from statekit.runtime.rewrite import StateRewrite, rewrite_savepoint as rewrite

    resolved = resolve_checkpoint(source_url, storage_options, "--from")
    metadata = read_metadata(resolved.metadata, resolved.pointer)
    location = _files(savepoint_dir, storage_options).savepoint_location(savepoint_dir, savepoint_id)
    written, pointer = rewrite(location, metadata, resolved.streams,
                               StateRewrite(rename, drop, operator_id=operator_id))
    summary = StreamSummary.of(stream_handles(written))
    return {"path": pointer.external_pointer, "job_id": written.job_id, "checkpoint_id": written.checkpoint_id,
            "source": resolved.pointer.external_pointer, "state_size": summary.state_size,
            "files": summary.files, "renamed": rename, "dropped": sorted(drop)}


def error_text(exc: BaseException) -> str:
    """One line naming what went wrong (the exception type too, unless it is statekit's)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"{exc.filename}: no such file or directory"
    if not isinstance(exc, StatekitError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text
