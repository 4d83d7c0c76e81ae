"""Options of the ``lmdb`` backend, parsed from ``spark.statekit.backend.lmdb.*``.

==================  =========  ===================================================================
option              default    meaning
==================  =========  ===================================================================
map-size            64m        initial size of the memory map; it doubles automatically when full
max-dbs             256        named databases per environment: at most this many states
max-readers         126        concurrent read transactions (pending snapshots, large iterations)
write-batch-size    32m        the open write transaction is committed once the writes it holds
                               reach about this many bytes (they are kept to be replayed if the
                               map has to grow)
sync                false      fsync the data file on every commit
metasync            false      fsync the meta page on every commit
writemap            false      write through a writable memory map instead of ``pwrite``
readahead           false      let the OS read ahead on page faults
local-dir           (temp)     where the environments' instance directories are created
==================  =========  ===================================================================
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass, fields
from typing import Any

from statekit.backends.common.changelog import ChangelogConfig
from statekit.backends.common.option_values import parse_bool, parse_size
from statekit.spi.errors import ConfigurationError

SETTING_PREFIX = "spark.statekit.backend.lmdb."
_SIZES = ("map_size", "write_batch_size")
_BOOLS = ("sync", "metasync", "writemap", "readahead")
_INTS = {"max_dbs": (1, 32767), "max_readers": (1, 1 << 20)}
_PATH_OPTIONS = ("local-dir",)
MIN_MAP_SIZE = 64 << 10


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

    @classmethod
    def parse(cls, options: dict[str, Any]) -> "LMDBOptions":
        known = {f.name.replace("_", "-"): f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for raw_name, value in options.items():
            name = str(raw_name).replace("_", "-")
            if name in _PATH_OPTIONS or str(raw_name) in ChangelogConfig.OPTIONS:
                continue
            if name not in known:
                raise ConfigurationError(f"unknown option {SETTING_PREFIX}{name}; known: "
                                         f"{', '.join(sorted(known) + list(ChangelogConfig.OPTIONS))}, local-dir")
            setting = SETTING_PREFIX + name
            field_name = known[name]
            if field_name in _SIZES:
                values[field_name] = parse_size(value, setting)
                if field_name == "map_size" and values[field_name] < MIN_MAP_SIZE:
                    raise ConfigurationError(f"{setting} must be at least {MIN_MAP_SIZE // 1024}k, got {value!r}")
            elif field_name in _BOOLS:
                values[field_name] = parse_bool(value, setting)
            else:
                low, high = _INTS[field_name]
                try:
                    number = int(str(value).strip())
                except (TypeError, ValueError):
                    raise ConfigurationError(f"{setting} must be an integer, got {value!r}") from None
                if not low <= number <= high:
                    raise ConfigurationError(f"{setting} must be between {low} and {high}, got {value!r}")
                values[field_name] = number
        return cls(**values)

    @property
    def initial_map_size(self) -> int:
        """``map_size`` rounded up to a whole number of OS pages."""
        page = mmap.PAGESIZE
        return -(-self.map_size // page) * page
