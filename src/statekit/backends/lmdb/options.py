"""Options of the ``lmdb`` backend, parsed from ``spark.statekit.backend.lmdb.*``.

====================  =========  ===================================================================
option                default    meaning
====================  =========  ===================================================================
map-size              64m        initial size of the memory map; it doubles automatically when full
max-dbs               256        named databases per environment: at most this many states
max-readers           126        concurrent read transactions (pending snapshots, large iterations)
write-batch-size      32m        the open write transaction is committed once the writes it holds
                                 reach about this many bytes (they are kept to be replayed if the
                                 map has to grow)
sync                  false      fsync the data file on every commit
metasync              false      fsync the meta page on every commit
writemap              false      write through a writable memory map instead of ``pwrite``
readahead             false      let the OS read ahead on page faults
local-dir             (temp)     where the environments' instance directories are created
snapshot-compression  none       compression of full and changelog snapshot files: none, lz4, zstd
====================  =========  ===================================================================

and the changelog options of incremental snapshots (``ChangelogConfig.OPTIONS``).
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass

from statekit.backends.common.canonical import SNAPSHOT_COMPRESSION_OPTION
from statekit.backends.common.changelog import ChangelogConfig
from statekit.backends.common.local_dirs import LOCAL_DIR_OPTION
from statekit.spi.options import Option, OptionSet, boolean, integer, size

SETTING_PREFIX = "spark.statekit.backend.lmdb."
MIN_MAP_SIZE = 64 << 10
OPTIONS = OptionSet(
    SETTING_PREFIX,
    Option("map-size", size(minimum=MIN_MAP_SIZE), 64 << 20, "initial size of the memory map (doubles when full)"),
    Option("max-dbs", integer(minimum=1, maximum=32767), 256, "named databases per environment: at most this "
                                                              "many states"),
    Option("max-readers", integer(minimum=1, maximum=1 << 20), 126, "concurrent read transactions"),
    Option("write-batch-size", size(), 32 << 20, "the write transaction is committed at about this many bytes"),
    Option("sync", boolean, False, "fsync the data file on every commit"),
    Option("metasync", boolean, False, "fsync the meta page on every commit"),
    Option("writemap", boolean, False, "write through a writable memory map"),
    Option("readahead", boolean, False, "let the OS read ahead on page faults"),
    LOCAL_DIR_OPTION,
    SNAPSHOT_COMPRESSION_OPTION,
    *ChangelogConfig.OPTIONS,
)


@dataclass(frozen=True)
class LMDBOptions:
    map_size: int = 64 << 20
    max_dbs: int = 256
    max_readers: int = 126
    write_batch_size: int = 32 << 20
    sync: bool = False
    metasync: bool = False
    writemap: bool = False
    readahead: bool = False

    @property
    def initial_map_size(self) -> int:
        """``map_size`` rounded up to a whole number of OS pages."""
        page = mmap.PAGESIZE
        return -(-self.map_size // page) * page
