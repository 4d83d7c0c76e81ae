"""statekit-sqlite: an example third-party statekit state backend, keyed state in SQLite.

Registered as ``sqlite`` in the ``statekit.backends`` entry-point group, so
``spark.statekit.backend=sqlite`` selects it once this package is installed.
"""
from statekit_sqlite.backend import SQLiteKeyedStateBackend, SQLiteStateBackend
from statekit_sqlite.options import SQLiteOptions

__all__ = ["SQLiteKeyedStateBackend", "SQLiteOptions", "SQLiteStateBackend"]
