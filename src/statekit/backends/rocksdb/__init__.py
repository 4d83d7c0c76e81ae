"""The RocksDB state backend (rocksdict): out-of-core keyed state with incremental checkpoints."""
from statekit.backends.rocksdb.backend import RocksDBKeyedStateBackend, RocksDBStateBackend
from statekit.backends.rocksdb.handle import IncrementalRocksDBStateHandle

__all__ = ["IncrementalRocksDBStateHandle", "RocksDBKeyedStateBackend", "RocksDBStateBackend"]
