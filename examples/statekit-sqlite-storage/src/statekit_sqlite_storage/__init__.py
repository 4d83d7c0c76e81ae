"""An example checkpoint storage plugin for statekit: every checkpoint of every job in one SQLite
database file. Select it with ``spark.statekit.checkpoint.storage=sqlite`` and
``spark.statekit.checkpoint.sqlite.path=/data/checkpoints.db``."""
from statekit_sqlite_storage.handles import SQLiteStreamHandle
from statekit_sqlite_storage.storage import SQLiteCheckpointStorage

__all__ = ["SQLiteCheckpointStorage", "SQLiteStreamHandle"]
