"""Job ids and operator ids: names that become directory names, so they are checked before
anything is written.

A job id names ``<checkpoint dir>/<job-id>/``: 1 to 128 characters out of ASCII letters, digits,
``_``, ``-`` and ``.``, starting with a letter or a digit, without ``..``, and none of the names
the layout gives its own entries (``chk-<n>``, ``shared``, ``savepoint-...``), in any letter case
(case-insensitive file systems); the first character already excludes ``_metadata``, ``_owner``
and hidden names. An operator id follows the same character rules.

Paths a snapshot's metadata gives (a file's path under the storage root, the name of a file in a
native backend's directory) become paths of the storage or of this machine when it is restored:
``relative_path_problem`` says why one cannot, so that no metadata makes a restore read or write
outside its directory.
"""
from __future__ import annotations

import re

from statekit.spi.errors import ConfigurationError

MAX_NAME_LENGTH = 128
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_RESERVED = re.compile(r"^(chk-\d+|shared|savepoint-.*)$", re.IGNORECASE)
_DRIVE = re.compile(r"^[A-Za-z]:")  # absolute on Windows, or relative to a drive's current directory
RULES = (f"1 to {MAX_NAME_LENGTH} characters out of ASCII letters, digits, '_', '-' and '.', starting with a "
         f"letter or a digit, without '..'")


def _problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a string"
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is {len(name)} characters long"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if ".." in name:
        return "it contains '..'"
    if not name[0].isascii() or not name[0].isalnum():
        return "it does not start with a letter or a digit"
    if not _SAFE.match(name):
        return "it contains a character outside the safe set"
    return None


def relative_path_problem(path: str, file_name: bool = False) -> str | None:
    """Why ``path`` is not a normalized relative POSIX path that stays inside the directory it is
    joined to (None when it is one): absolute (``/...``, a Windows drive ``C:``), ``..``, empty or
    ``.`` segments, backslashes (a separator on Windows) and NUL bytes are refused. ``file_name``: a single segment, no ``/``."""
    if not path:
        return "it is empty"
    if "\\" in path or "\0" in path:
        return "it contains a backslash or a NUL character"
    if path.startswith("/") or _DRIVE.match(path):
        return "it is absolute"
    if file_name and "/" in path:
        return "it contains a path separator ('/'): it must be a file name"
    segments = path.split("/")
    if ".." in segments:
        return "it contains a '..' segment"
    if "" in segments or "." in segments:
        return "it has an empty or '.' segment (it is not normalized)"
    return None


def check_job_id(job_id: object, where: str = "job_id") -> str:
    """``job_id`` if it is a valid job id, else a ``ConfigurationError`` naming ``where`` (the
    argument or setting it came from) and the rules."""
    problem = _problem(job_id)
    if problem is None and _RESERVED.match(job_id):  # type: ignore[arg-type]
        problem = "the checkpoint layout reserves this name for its own entries (chk-<n>, shared, savepoint-*)"
    if problem is not None:
        raise ConfigurationError(f"{where}={job_id!r} is not a valid job id: {problem}. A job id names the job's "
                                 f"directory in the checkpoint directory: {RULES}, e.g. 'clicks-per-user'")
    return job_id  # type: ignore[return-value]


def check_operator_id(operator_id: object, where: str = "operator_id") -> str:
    """``operator_id`` if it is a valid operator id, else a ``ConfigurationError`` naming ``where``."""
    problem = _problem(operator_id)
    if problem is not None:
        raise ConfigurationError(f"{where}={operator_id!r} is not a valid operator id: {problem}. Use {RULES}, "
                                 f"e.g. 'keyed-process'")
    return operator_id  # type: ignore[return-value]
