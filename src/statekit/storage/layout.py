"""The directory layout of checkpoints and savepoints on a file system (Flink's), shared by the
``filesystem`` storage, savepoints of every storage and the inspection tools::

    <dir>/<job-id>/_owner               the job's owner record (fencing)
    <dir>/<job-id>/chk-<n>/_metadata    written last, atomically: its presence = complete
    <dir>/<job-id>/chk-<n>/<file>       exclusive files of checkpoint n
    <dir>/<job-id>/shared/<file>        files shared by incremental checkpoints, named
                                        ``chk-<n>_<name>-<unique>`` after the checkpoint that
                                        wrote them (aborting it finds them without their handles)
    <savepoint-dir>/savepoint-<id>/     self-contained: _metadata and its files
"""
from __future__ import annotations

import re

METADATA_FILE = "_metadata"
OWNER_FILE = "_owner"
SHARED_DIR = "shared"
SAVEPOINT_PREFIX = "savepoint-"
CHECKPOINT_DIR_PATTERN = re.compile(r"^chk-(\d+)$")



def shared_file_tag(checkpoint_id: int) -> str:
    """How the names of the shared files written for checkpoint ``checkpoint_id`` begin."""
    return f"chk-{checkpoint_id}_"


__all__ = ["CHECKPOINT_DIR_PATTERN", "METADATA_FILE", "OWNER_FILE", "SAVEPOINT_PREFIX", "SHARED_DIR",
           "shared_file_tag"]
