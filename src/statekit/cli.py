"""The ``statekit`` command line: inspect checkpoints and savepoints, turn checkpoints into savepoints.

Usage::

    statekit checkpoints list <dir>          checkpoints of every job under <dir> (or of one job directory)
    statekit checkpoints describe <path>     one checkpoint or savepoint in detail
    statekit checkpoints history <dir> [--job ID] [--last N] [--plot FILE.png]
                                             a job's last checkpoints: sizes, durations, bytes written
    statekit savepoint create --from <checkpoint> --to <savepoint-dir> [--backend NAME] [--trust-pickle] [--sign]
    statekit savepoint rewrite --from <savepoint> --to <savepoint-dir> --id ID [--rename OLD=NEW] [--drop NAME]
    statekit state get <path> --state NAME --key KEY [--operator ID] [--trust-pickle]
                                             one key's state, as of that checkpoint
    statekit state skew <path> [--operator ID] [--top N] [--plot FILE.png]
                                             state bytes per key group, the hottest named

Every path is an fsspec URL: a local path, ``file://``, ``s3://``, ``memory://``, ... Options of
every command:

``--json``
    machine-readable output on stdout (one JSON document, keys documented below) instead of text.
``-o KEY=VALUE`` / ``--storage-option KEY=VALUE``
    an fsspec storage option (repeatable); VALUE is parsed as JSON when it is valid JSON, e.g.
    ``-o anon=false -o 'client_kwargs={"endpoint_url": "http://127.0.0.1:5000"}'``.

Exit status: 0 on success; 2 on any error (unknown path, not a checkpoint, corrupt metadata,
unknown backend, bad arguments), with one line on stderr starting with ``statekit: error:``.

Paths
-----
``checkpoints list <dir>`` accepts a checkpoint directory holding job directories
(``<dir>/<job-id>/chk-<n>/_metadata``), a single job directory, or a savepoint directory
(``<dir>/savepoint-<id>/_metadata``). ``checkpoints describe`` and ``savepoint create --from``
accept a ``_metadata`` file, a ``chk-<n>`` or ``savepoint-<id>`` directory, or a job directory
(its latest completed checkpoint).

JSON output (stable keys)
-------------------------
Sizes are in bytes. A *state size* is the sum of the sizes of the streams (files and inline
bytes) a snapshot references, each file counted once even when several handles share it; *files*
counts those distinct files (inline state is not a file). Times are ``timestamp`` (seconds since
the epoch, from the metadata) and ``time`` (the same instant, ISO 8601 UTC).

``checkpoints list``::

    {"path": URL of <dir>,
     "jobs": [{"job_id": str, "path": URL,
               "checkpoints": [ENTRY, ...]}],           # sorted by checkpoint id
     "savepoints": [ENTRY, ...]}                        # savepoint-* directories directly in <dir>

    ENTRY = {"name": "chk-<n>" or "savepoint-<id>", "path": URL,
             "checkpoint_id": int or null,              # null for an unreadable savepoint
             "status": "completed" | "incomplete" | "corrupt",
             "job_id": str or null, "timestamp": float or null, "time": str or null,
             "state_size": int or null, "files": int or null,
             "incremental": bool or null, "savepoint": bool or null,
             "backend": str or null,
             "error": str or null}                      # why a "corrupt" entry cannot be read

    "incomplete": no ``_metadata`` (the checkpoint never completed); the other fields are null.
    "corrupt": ``_metadata`` cannot be read; listed with its error, the exit status stays 0.

``checkpoints describe``::

    {"path": URL, "checkpoint_id": int, "job_id": str, "savepoint": bool,
     "timestamp": float, "time": str, "backend": str or null, "incremental": bool,
     "format": "canonical" or "native",                 # a full checkpoint's format
     "source_checkpoint": int or null,                  # savepoints: the checkpoint they came from
     "properties": {...},                               # every metadata property, as recorded
     "state_size": int, "files": int,
     "operators": [{"operator_id": str, "parallelism": int, "max_parallelism": int,
                    "state_size": int,
                    "key_serializer": SERIALIZER or null,
                    "states": [{"name": str, "kind": str, "ttl_seconds": float or null,
                                "ttl_time": "processing-time" or "event-time" or null,
                                "serializers": {role: SERIALIZER}}],
                    "operator_states": [{"name": str, "mode": str, "size": int,
                                         "serializers": {role: SERIALIZER}}],
                    "subtasks": [{"index": int, "key_group_range": [first, last],
                                  "state_size": int, "keyed_state_size": int,
                                  "operator_state_size": int}]}],
     "shared_files": FILES,                             # files under shared/ (incremental)
     "exclusive_files": FILES,                          # every other file
     "inline": {"count": int, "bytes": int}}            # state kept inside the metadata

    SERIALIZER = {"class": short class name, "identity": "module:Class", "version": int,
                  "config": {...}}
    FILES = {"count": int, "bytes": int, "files": [{"path": str, "size": int}]}   # sorted by path

    File paths are relative to the job directory (checkpoints) or the savepoint directory.

``checkpoints history``::

    {"path": URL of the job directory, "job_id": str,
     "checkpoints": [{"checkpoint_id": int, "time": str or null, "duration_ms": float or null,
                      "bytes_written": int or null, "bytes_written_full": int or null,
                      "bytes_written_incremental": int or null, "bytes_reused": int or null,
                      "state_size": int or null, "kind": "full" | "incremental" or null,
                      "parallelism": int or null, "restore_sources": {source: subtasks} or null,
                      "rows_in": int or null, "rows_out": int or null}]}   # oldest first

    The rows come from the latest completed checkpoint's ``metrics`` property (its own epoch and
    up to 100 before it, along the job's lineage); checkpoints written without metrics list the
    retained checkpoints, with null where the metadata does not say.

``state skew``::

    {"path": URL, "job_id": str, "checkpoint_id": int, "operator_id": str, "parallelism": int,
     "max_parallelism": int, "total_bytes": int, "exact": bool,
     "key_groups": [{"key_group": int, "subtask": int, "bytes": int, "exact": bool}],
     "hottest": [{"key_group": int, "subtask": int, "bytes": int, "exact": bool, "share": float,
                  "times_mean": float}]}

    Bytes per key group are exact for canonical snapshots and changelog chains, and estimated
    (a subtask's size spread over its key groups) for native and RocksDB incremental snapshots.

``savepoint create``::

    {"path": URL of the savepoint directory, "job_id": str, "checkpoint_id": int,
     "source": URL of the checkpoint converted, "backend": str, "state_size": int, "files": int}

``savepoint create`` restores every subtask of the checkpoint (full or incremental) with the
backend that wrote it (``--backend``, default the metadata's ``backend`` property, else
``heap``) and writes a canonical, self-contained savepoint to
``<savepoint-dir>/savepoint-<job-id>-<checkpoint-id>/``. It never overwrites a savepoint.

``state get``::

    {"path": URL of the snapshot read, "checkpoint_id": int, "state": str, "kind": str,
     "key": the key, "key_group": int,
     "value": the value | [elements] | {map key: value} | [timer timestamps] | null}

``--key`` is typed as the job's key column recorded in the checkpoint (several key columns: a
JSON array; dates and timestamps in ISO 8601, e.g. ``2024-01-31``); text that is not of the
column's type is an error. A snapshot without key columns takes JSON, or else the text itself. Values that are not
JSON print as their ``repr``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Sequence

from statekit import __version__
from statekit.checkpoint.signing import SIGNING_ENV, signing
from statekit.inspection import (
    InspectionError, create_savepoint, describe, error_text, list_checkpoints, rewrite_savepoint,
)
from statekit.spi.errors import StatekitError
from statekit.history import checkpoint_history

if TYPE_CHECKING:
    from statekit.reading.snapshot_reader import KeyColumn

PROG = "statekit"
EXIT_OK = 0
EXIT_ERROR = 2

def _human_time(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{size} B ({value:.1f} {unit})"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def _serializer_text(info: dict[str, Any]) -> str:
    text = info["class"]
    return text if info.get("version") is None else f"{text} v{info['version']}"


def _table(rows: list[list[str]], right: Sequence[int] = ()) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _entry_row(entry: dict[str, Any], first: str) -> list[str]:
    completed = entry["status"] == "completed"
    return [first, entry["status"], _human_time(entry["timestamp"]), _dash(entry["state_size"]),
            _dash(entry["files"]),
            ("incremental" if entry["incremental"] else "full") if completed else "-",
            ("savepoint" if entry["savepoint"] else "checkpoint") if completed else "-",
            _dash(entry["backend"])]


HEADER = ["STATUS", "TIME", "SIZE (BYTES)", "FILES", "FORMAT", "TYPE", "BACKEND"]


def _print_list(doc: dict[str, Any], out: Callable[[str], None]) -> None:
    if not doc["jobs"] and not doc["savepoints"]:
        out(f"no checkpoints or savepoints under {doc['path']}")
        return
    for job in doc["jobs"]:
        entries = job["checkpoints"]
        counts = {s: sum(1 for e in entries if e["status"] == s) for s in ("completed", "incomplete", "corrupt")}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no checkpoints"
        out(f"job {job['job_id']} ({job['path']}): {summary}")
        if entries:
            rows = [["ID", *HEADER]] + [_entry_row(e, str(e["checkpoint_id"])) for e in entries]
            for line in _table(rows, right=(0, 3, 4)):
                out("  " + line)
        for e in entries:
            if e["error"]:
                out(f"  {e['name']}: {e['error']}")
    if doc["savepoints"]:
        if doc["jobs"]:
            out("")
        out(f"savepoints in {doc['path']}: {len(doc['savepoints'])}")
        rows = [["NAME", "JOB", "ID", *HEADER]] + [
            [e["name"], _dash(e["job_id"]), *_entry_row(e, _dash(e["checkpoint_id"]))] for e in doc["savepoints"]]
        for line in _table(rows, right=(2, 5, 6)):
            out("  " + line)
        for e in doc["savepoints"]:
            if e["error"]:
                out(f"  {e['name']}: {e['error']}")


def _print_files(title: str, files: dict[str, Any], out: Callable[[str], None]) -> None:
    out(f"{title}: {files['count']}, {_human_size(files['bytes'])}")
    if files["files"]:
        rows = [[f["path"], str(f["size"])] for f in files["files"]]
        for line in _table(rows, right=(1,)):
            out("  " + line)


def _print_describe(doc: dict[str, Any], out: Callable[[str], None]) -> None:
    kind = "savepoint" if doc["savepoint"] else "checkpoint"
    out(f"{kind} {doc['checkpoint_id']} of job {doc['job_id']}")
    fields = [("path", doc["path"]),
              ("type", f"{kind}, {'incremental' if doc['incremental'] else 'full'}"
                       + (", native format" if doc["format"] == "native" else "")),
              ("time", f"{_human_time(doc['timestamp'])} (timestamp {doc['timestamp']:.3f})"),
              ("backend", _dash(doc["backend"]))]
    if doc["source_checkpoint"] is not None:
        fields.append(("source", f"checkpoint {doc['source_checkpoint']}"))
    fields.append(("state size", f"{_human_size(doc['state_size'])}: {doc['files']} files, "
                                 f"{doc['inline']['count']} inline streams of {doc['inline']['bytes']} B"))
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        out(f"  {(name + ':').ljust(width)} {value}")
    for op in doc["operators"]:
        out("")
        out(f"operator {op['operator_id']}: parallelism {op['parallelism']}, max parallelism "
            f"{op['max_parallelism']}, state size {_human_size(op['state_size'])}")
        if op["key_serializer"]:
            out(f"  key serializer: {_serializer_text(op['key_serializer'])}")
        out(f"  keyed states: {len(op['states'])}")
        if op["states"]:
            rows = [["NAME", "KIND", "SERIALIZERS"]]
            for state in op["states"]:
                serializers = ", ".join(f"{role}={_serializer_text(s)}" for role, s in state["serializers"].items())
                if state["ttl_seconds"] is not None:
                    serializers += f"; ttl {state['ttl_seconds']}s {state['ttl_time']}"
                rows.append([state["name"], state["kind"], serializers])
            for line in _table(rows):
                out("    " + line)
        if op["operator_states"]:
            out(f"  operator states: {len(op['operator_states'])}")
            rows = [["NAME", "MODE", "SIZE (BYTES)", "SERIALIZERS"]]
            for state in op["operator_states"]:
                serializers = ", ".join(f"{role}={_serializer_text(s)}" for role, s in state["serializers"].items())
                rows.append([state["name"], state["mode"], str(state["size"]), serializers])
            for line in _table(rows, right=(2,)):
                out("    " + line)
        out("  subtasks:")
        rows = [["SUBTASK", "KEY GROUPS", "SIZE (BYTES)", "KEYED", "OPERATOR"]]
        for sub in op["subtasks"]:
            first, last = sub["key_group_range"]
            rows.append([str(sub["index"]), f"{first}-{last}" if last >= first else "empty",
                         str(sub["state_size"]), str(sub["keyed_state_size"]), str(sub["operator_state_size"])])
        for line in _table(rows, right=(0, 2, 3, 4)):
            out("    " + line)
    out("")
    _print_files("shared files", doc["shared_files"], out)
    _print_files("exclusive files", doc["exclusive_files"], out)
    out(f"inline state: {doc['inline']['count']} streams, {_human_size(doc['inline']['bytes'])}")
    out("")
    out(f"read its keyed state: spark.read.format('statekit').load('{doc['path']}') (after import statekit.spark), "
        f"or one key: statekit state get {doc['path']} --state NAME --key KEY")


def _print_created(doc: dict[str, Any], out: Callable[[str], None]) -> None:
    out(f"savepoint of checkpoint {doc['checkpoint_id']} of job {doc['job_id']} written to {doc['path']}")
    out(f"  from {doc['source']} with backend {doc['backend']}; "
        f"{_human_size(doc['state_size'])}, {doc['files']} files")


# ---------------------------------------------------------------------------- command line


def _storage_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    given = [*(getattr(args, "global_storage_options", None) or ()), *(getattr(args, "storage_options", None) or ())]
    for item in given:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InspectionError(f"--storage-option expects KEY=VALUE, got {item!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        options[key] = value
    return options


Printer = Callable[[dict[str, Any], Callable[[str], None]], None]


def _emit(args: argparse.Namespace, doc: dict[str, Any], printer: Printer) -> None:
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        printer(doc, print)


def _cmd_list(args: argparse.Namespace) -> int:
    _emit(args, list_checkpoints(args.dir, _storage_options(args)), _print_list)
    return EXIT_OK


def _cmd_describe(args: argparse.Namespace) -> int:
    _emit(args, describe(args.path, _storage_options(args)), _print_describe)
    return EXIT_OK


def _cmd_history(args: argparse.Namespace) -> int:
    return _emit_plotted(args, checkpoint_history(args.dir, args.job, args.last, _storage_options(args)),
                         "history_figure", _print_history)


def _cmd_skew(args: argparse.Namespace) -> int:
    from statekit.skew import key_group_bytes  # noqa: PLC0415 - loads the backends' handles (pyarrow)

    return _emit_plotted(args, key_group_bytes(args.path, args.operator, args.top, _storage_options(args)),
                         "skew_figure", _print_skew)


def _emit_plotted(args: argparse.Namespace, doc: dict[str, Any], figure: str, printer: Printer) -> int:
    """``_emit``, after drawing ``plots.<figure>`` of the document into ``--plot`` if given."""
    if args.plot:
        from statekit import plots  # noqa: PLC0415 - loads matplotlib

        plots.save(getattr(plots, figure)(doc), args.plot)
    _emit(args, doc, printer)
    return EXIT_OK


def _print_history(doc: dict[str, Any], out: Callable[[str], None]) -> None:
    out(f"job {doc['job_id']} ({doc['path']}): last {len(doc['checkpoints'])} checkpoints")
    rows = [["ID", "TIME", "DURATION (MS)", "WRITTEN (BYTES)", "REUSED (BYTES)", "CHECKPOINT (BYTES)",
             "STATE (ENTRIES, BYTES)", "TIMERS", "KIND", "PARALLELISM", "RESTORED FROM"]]
    previous = None
    for row in doc["checkpoints"]:
        sources = row["restore_sources"]
        parallelism = _dash(row["parallelism"])
        if previous is not None and row["parallelism"] is not None and previous != row["parallelism"]:
            parallelism += f" (rescale {previous}->{row['parallelism']})"
        previous = row["parallelism"] if row["parallelism"] is not None else previous
        rows.append([str(row["checkpoint_id"]), _dash(row["time"]), _dash(row["duration_ms"]),
                     _dash(row["bytes_written"]), _dash(row["bytes_reused"]), _dash(row["state_size"]),
                     _live_state(row), _dash(row["timers_pending"]), _dash(row["kind"]), parallelism,
                     ", ".join(f"{k} x{v}" for k, v in sorted(sources.items())) if sources else "-"])
    for line in _table(rows, right=(0, 2, 3, 4, 5, 6, 7)):
        out(line)
    out("STATE: the backends' entries (~ where estimated) and bytes (always estimated), timers left out")


def _live_state(row: dict[str, Any]) -> str:
    """A history row's state in the backends: ``entries, ~bytes``, or ``-`` where unknown."""
    if row["state_entries"] is None:
        return "-"
    return f"{'' if row['state_entries_exact'] else '~'}{row['state_entries']}, ~{row['live_state_bytes']}"


#: from no bytes to the most bytes of any key group
_SHADES = " .:-=+*#%@"


def _print_skew(doc: dict[str, Any], out: Callable[[str], None]) -> None:
    estimated = "" if doc["exact"] else " (estimated: native or RocksDB incremental files spread over key groups)"
    out(f"checkpoint {doc['checkpoint_id']} of job {doc['job_id']}, operator {doc['operator_id']}: "
        f"{doc['total_bytes']} state bytes in {doc['max_parallelism']} key groups{estimated}")
    groups = doc["key_groups"]
    most = max((g["bytes"] for g in groups), default=0) or 1
    for start in range(0, len(groups), 64):
        cells = "".join(_SHADES[min(len(_SHADES) - 1, round(g["bytes"] / most * (len(_SHADES) - 1)))]
                        for g in groups[start:start + 64])
        out(f"{start:>6} |{cells}|")
    rows = [["KEY GROUP", "SUBTASK", "BYTES", "SHARE", "x MEAN"]]
    rows += [[str(g["key_group"]), str(g["subtask"]), str(g["bytes"]), f"{g['share']:.1%}", f"{g['times_mean']:.1f}"]
             for g in doc["hottest"]]
    out("hottest key groups:")
    for line in _table(rows, right=(0, 1, 2, 3, 4)):
        out(line)


def _cmd_create(args: argparse.Namespace) -> int:
    _emit(args, create_savepoint(args.source, args.target, args.backend, _storage_options(args), args.trust_pickle),
          _print_created)
    return EXIT_OK


def _cmd_rewrite(args: argparse.Namespace) -> int:
    bad = [r for r in args.rename if r.count("=") != 1 or r.startswith("=") or r.endswith("=")]
    if bad:
        raise InspectionError(f"--rename takes OLD=NEW, got {bad[0]!r}")
    if not args.rename and not args.drop:
        raise InspectionError("say what to rewrite: --rename OLD=NEW or --drop NAME (repeatable)")
    rename = dict(r.split("=") for r in args.rename)
    _emit(args, rewrite_savepoint(args.source, args.target, args.savepoint_id, rename, frozenset(args.drop),
                                  args.operator, _storage_options(args)), _print_rewritten)
    return EXIT_OK


def _print_rewritten(doc: dict[str, Any], out: Callable[[str], None]) -> None:
    changes = [f"{old} -> {new}" for old, new in doc["renamed"].items()] + [f"{name} dropped" for name in doc["dropped"]]
    out(f"savepoint of job {doc['job_id']} written to {doc['path']}")
    out(f"  from {doc['source']}: {', '.join(changes)}; {_human_size(doc['state_size'])}, {doc['files']} files")


#: how ``--key`` text becomes a value of a key column's Spark SQL type
_KEY_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    **{name: (int, "an integer") for name in ("bigint", "int", "smallint", "tinyint")},
    "double": (float, "a number"), "float": (float, "a number"),
    "boolean": (lambda text: {"true": True, "false": False}[text.strip().lower()], "true or false"),
    "date": (date.fromisoformat, "a date, e.g. 2024-01-31"),
    "timestamp": (datetime.fromisoformat, "a timestamp, e.g. 2024-01-31T12:00:00+00:00"),
    "binary": (lambda text: text.encode("utf-8"), "text"),
}


def _column_value(value: Any, column: KeyColumn, text: str) -> Any:
    """``value`` (the text of ``--key``, or an element of its JSON array) as a value of ``column``'s type."""
    if column.type in ("float", "double") and type(value) is int:
        return float(value)
    if not isinstance(value, str) or column.type not in _KEY_PARSERS:
        return value
    parse, wanted = _KEY_PARSERS[column.type]
    try:
        return parse(value)
    except (ValueError, KeyError):
        raise InspectionError(f"--key {text!r}: key column {column.name!r} is a {column.type}; "
                              f"give {wanted}, not {value!r}") from None


def _key_of(text: str, columns: tuple[KeyColumn, ...] | None) -> Any:
    """The key a ``--key`` names: typed as the job's recorded key columns (several columns: a
    JSON array); without them, JSON if it parses, else the text itself."""
    if columns is not None and len(columns) == 1:
        return _column_value(text, columns[0], text)
    try:
        value = json.loads(text)
    except ValueError:
        if columns is None:
            return text
        value = None
    if columns is None:
        return tuple(value) if isinstance(value, list) else value
    if not isinstance(value, list) or len(value) != len(columns):
        raise InspectionError(f"--key {text!r}: the job has key columns {[c.name for c in columns]}; give "
                              f"their values as a JSON array, e.g. '[\"a\", 1]'")
    return tuple(_column_value(item, column, text) for item, column in zip(value, columns))


def _cmd_state_get(args: argparse.Namespace) -> int:
    from statekit.query import QueryableState
    from statekit.reading.cells import readable

    state = QueryableState(args.path, operator=args.operator, storage_options=_storage_options(args),
                           trust_pickle=args.trust_pickle)
    key = _key_of(args.key, state.key_columns)
    value = state.get(args.state, key)
    doc = {"path": state.url, "checkpoint_id": state.checkpoint_id, "state": args.state, "kind": state.kind(args.state),
           "key": key, "key_group": state.key_group(key), "value": value}
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2, default=repr) + "\n")
    else:
        print(readable(value) if value is not None else "(no value)")
    return EXIT_OK


class _ArgumentParser(argparse.ArgumentParser):
    """Usage errors end in the same ``statekit: error:`` line as every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{PROG}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    common = _ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document (keys documented in `pydoc statekit.cli`)")
    common.add_argument("-o", "--storage-option", dest="storage_options", action="append", metavar="KEY=VALUE",
                        default=argparse.SUPPRESS, help="an fsspec storage option (repeatable; VALUE may be JSON)")

    parser = _ArgumentParser(
        prog=PROG, description="Inspect statekit checkpoints and savepoints; convert checkpoints to savepoints.",
        epilog="Paths are fsspec URLs (local paths, file://, s3://, memory://, ...).")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--json", action="store_true", default=False, help=argparse.SUPPRESS)
    parser.add_argument("-o", "--storage-option", dest="global_storage_options", action="append",
                        metavar="KEY=VALUE", default=[], help="an fsspec storage option (repeatable)")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", required=True)

    checkpoints = groups.add_parser("checkpoints", help="list and describe checkpoints and savepoints")
    checkpoint_commands = checkpoints.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    listing = checkpoint_commands.add_parser(
        "list", parents=[common], help="the checkpoints of every job in a directory",
        description="List the completed and incomplete checkpoints of every job under DIR (a checkpoint "
                    "directory holding job directories, one job directory, or a savepoint directory).")
    listing.add_argument("dir", help="checkpoint, job or savepoint directory URL")
    listing.set_defaults(handler=_cmd_list)
    describing = checkpoint_commands.add_parser(
        "describe", parents=[common], help="one checkpoint or savepoint in detail",
        description="Describe one completed checkpoint or savepoint: operators, states, serializers, "
                    "key groups, sizes and files.")
    describing.add_argument("path", help="a _metadata file, a chk-<n> or savepoint-<id> directory, or a job "
                                         "directory (its latest completed checkpoint)")
    describing.set_defaults(handler=_cmd_describe)
    history = checkpoint_commands.add_parser(
        "history", parents=[common], help="a job's last checkpoints: sizes, durations, bytes written",
        description="Print a job's last checkpoints (id, time, duration, bytes written and reused, state size, "
                    "full or incremental, parallelism, where subtasks restored from), from the metrics its latest "
                    "checkpoint recorded; --plot draws them.")
    history.add_argument("dir", help="a checkpoint directory URL (or one job's directory)")
    history.add_argument("--job", default=None, metavar="ID", help="the job (needed when DIR holds several)")
    history.add_argument("--last", type=int, default=20, metavar="N", help="how many checkpoints (default 20)")
    history.add_argument("--plot", default=None, metavar="FILE.png",
                         help="also draw sizes and durations over time, full vs incremental, rescales marked "
                              "(needs matplotlib: the plot extra)")
    history.set_defaults(handler=_cmd_history)

    savepoint = groups.add_parser("savepoint", help="create savepoints offline")
    savepoint_commands = savepoint.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    create = savepoint_commands.add_parser(
        "create", parents=[common], help="convert a completed checkpoint to a canonical savepoint",
        description="Convert a completed checkpoint (full or incremental, any backend) to a canonical, "
                    "self-contained savepoint in <savepoint-dir>/savepoint-<job-id>-<checkpoint-id>/.")
    create.add_argument("--from", dest="source", required=True, metavar="CHECKPOINT",
                        help="a _metadata file, a chk-<n> directory or a job directory (latest completed)")
    create.add_argument("--to", dest="target", required=True, metavar="SAVEPOINT_DIR",
                        help="the savepoint directory URL")
    create.add_argument("--backend", default=None, metavar="NAME",
                        help="the state backend able to read the checkpoint (default: the one recorded in its "
                             "metadata, else heap); a built-in name, an entry point or module:Class")
    create.add_argument("--sign", action="store_true",
                        help=f"sign the savepoint with the secret in {SIGNING_ENV} without requiring the checkpoint "
                             f"to be signed: how a job's unsigned checkpoints become signed (check the source first)")
    create.add_argument("--trust-pickle", action="store_true",
                        help="restore state that runs code when read (pickle) from this checkpoint, whose writers "
                             "you trust")
    create.set_defaults(handler=_cmd_create)
    rewriting = savepoint_commands.add_parser(
        "rewrite", parents=[common], help="a new savepoint with states renamed or dropped",
        description="Write a new savepoint from a savepoint, with states renamed (--rename OLD=NEW) and dropped "
                    "(--drop NAME), in <savepoint-dir>/savepoint-<id>/. No value is read: every kind of state "
                    "passes as it was. To change values, use statekit.runtime.rewrite (or statekit.spark."
                    "rewrite_savepoint) with a KeyedStateTransform.")
    rewriting.add_argument("--from", dest="source", required=True, metavar="SAVEPOINT",
                           help="a savepoint directory or its _metadata file")
    rewriting.add_argument("--to", dest="target", required=True, metavar="SAVEPOINT_DIR",
                           help="the directory URL of the new savepoint")
    rewriting.add_argument("--id", dest="savepoint_id", required=True, metavar="ID",
                           help="the new savepoint's id: it is written to savepoint-<ID>")
    rewriting.add_argument("--rename", action="append", default=[], metavar="OLD=NEW", help="rename a state")
    rewriting.add_argument("--drop", action="append", default=[], metavar="NAME", help="drop a state")
    rewriting.add_argument("--operator", default=None, metavar="ID", help="the operator (when there are several)")
    rewriting.set_defaults(handler=_cmd_rewrite)

    state = groups.add_parser("state", help="read keyed state from a checkpoint or savepoint")
    state_commands = state.add_subparsers(dest="command", metavar="SUBCOMMAND", required=True)
    get = state_commands.add_parser(
        "get", parents=[common], help="one key's state, as of a completed checkpoint",
        description="Print one key's state in a completed checkpoint or savepoint, reading only its key "
                    "group (statekit.query.QueryableState). Whole states, as a DataFrame: "
                    "spark.read.format('statekit').load(PATH).")
    get.add_argument("path", help="a checkpoint or savepoint, or a job directory (its latest completed checkpoint)")
    get.add_argument("--state", required=True, metavar="NAME", help="the state's name")
    get.add_argument("--key", required=True, metavar="KEY",
                     help="the key, typed as the job's key column; several key columns as a JSON array")
    get.add_argument("--operator", default=None, metavar="ID", help="the operator (when the snapshot holds several)")
    get.add_argument("--trust-pickle", action="store_true",
                     help="decode state that runs code when read (pickle); without it, such values print as bytes")
    get.set_defaults(handler=_cmd_state_get)
    skew = state_commands.add_parser(
        "skew", parents=[common], help="state bytes per key group, the hottest named",
        description="Show the state bytes of each key group of a checkpoint or savepoint as a heatmap (text, or a "
                    "PNG with --plot) and name the hottest key groups. Exact for canonical and changelog "
                    "snapshots, estimated for native and RocksDB incremental ones (said in the output).")
    skew.add_argument("path", help="a checkpoint or savepoint, or a job directory (its latest completed checkpoint)")
    skew.add_argument("--operator", default=None, metavar="ID", help="the operator (when the snapshot holds several)")
    skew.add_argument("--top", type=int, default=5, metavar="N", help="how many hottest key groups (default 5)")
    skew.add_argument("--plot", default=None, metavar="FILE.png", help="also draw the heatmap (needs matplotlib)")
    skew.set_defaults(handler=_cmd_skew)
    return parser


def _error(exc: BaseException) -> int:
    print(f"{PROG}: error: {error_text(exc)}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, or 2 on error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error, already printed by argparse (2)
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        sign_only = getattr(args, "sign", False)
        if sign_only and not os.environ.get(SIGNING_ENV):
            raise InspectionError(f"--sign signs the savepoint with the secret in {SIGNING_ENV}, which is not set")
        with signing(verify=not sign_only):  # the secret in the environment, if any
            return args.handler(args)
    except BrokenPipeError:  # e.g. `statekit checkpoints list dir | head`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (StatekitError, OSError) as exc:
        return _error(exc)


if __name__ == "__main__":
    sys.exit(main())

