"""Transactional sinks (``spi.sinks``) for exactly-once output end to end:

- ``ParquetFileSink``: Parquet files in any fsspec directory (local, S3, ...), one file per subtask
  and epoch, staged and published by a rename (a copy on object stores) once the checkpoint is
  complete; readers of the directory see committed epochs only.
- ``PostgresSink``: rows in a PostgreSQL table through two-phase commit (``PREPARE TRANSACTION``,
  ``COMMIT PREPARED``); needs ``pip install statekit[postgres]``.
- ``SqliteWriteAheadSink``: rows in an SQLite table, logged in checkpoint storage and published
  once per epoch after the checkpoint is complete (a write-ahead log: no transactions across
  processes needed).
- ``DiscardingSink``: drops the output where it is computed, for jobs whose product is their state
  and for measuring a job apart from its output.

Names are imported on first use, so a sink's driver package is loaded only when it is used."""
from __future__ import annotations

from typing import TYPE_CHECKING

from statekit.lazy import lazy_exports

_EXPORTS = {
    "DiscardingSink": "statekit.sinks.discarding",
    "ParquetFileSink": "statekit.sinks.files",
    "PostgresSink": "statekit.sinks.postgres",
    "SqliteWriteAheadSink": "statekit.sinks.sqlite",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from statekit.sinks.discarding import DiscardingSink
    from statekit.sinks.files import ParquetFileSink
    from statekit.sinks.postgres import PostgresSink
    from statekit.sinks.sqlite import SqliteWriteAheadSink

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
