"""State backend implementations: heap, rocksdb, lmdb, and the code they share (``common``)."""
