"""The LMDB state backend (py-lmdb): out-of-core keyed state in memory-mapped B+trees, full
snapshots from MVCC read transactions. See ``backend.py`` for the design."""
from statekit.backends.lmdb.backend import LMDBKeyedStateBackend, LMDBStateBackend
from statekit.backends.lmdb.options import LMDBOptions
from statekit.backends.lmdb.store import LMDBStore

__all__ = ["LMDBKeyedStateBackend", "LMDBOptions", "LMDBStateBackend", "LMDBStore"]
