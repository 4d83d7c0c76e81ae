"""Options of the ``sqlite`` backend, from ``spark.statekit.backend.sqlite.*``.

Spark conf hands them to ``SQLiteStateBackend(**options)`` as strings, named without the prefix
(``cache-size="16m"``). Unknown names and bad values fail at once, naming the setting.

==================================  =======  =========================================================
option                              default  meaning
==================================  =======  =========================================================
cache-size                          64m      SQLite page cache of each keyed backend's connection
synchronous                         off      ``off`` | ``normal`` | ``full``: fsync policy of commits
local-dir                           (temp)   where the instance directories are created
changelog.max-chain-length          16       incremental checkpoints: deltas before a new base
changelog.max-chain-bytes-ratio     1.0      ... or once the deltas' bytes pass this times the base's
==================================  =======  =========================================================

``synchronous=off`` is the default because the checkpoint, not the local database, is what must
survive a crash: after a failure the working state is rebuilt from the last checkpoint.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statekit.backends.common import ChangelogConfig, OptionParser, parse_options, parse_size
from statekit.spi import ConfigurationError

SETTING_PREFIX = "spark.statekit.backend.sqlite."
SYNCHRONOUS_MODES = ("off", "normal", "full")


def _synchronous(value: Any, setting: str) -> str:
    mode = str(value).strip().lower()
    if mode not in SYNCHRONOUS_MODES:
        raise ConfigurationError(f"{setting} must be one of {', '.join(SYNCHRONOUS_MODES)}, got {value!r}")
    return mode


def _directory(value: Any, setting: str) -> str:
    if not str(value).strip():
        raise ConfigurationError(f"{setting} must be a directory path, got {value!r}")
    return str(value)


_PARSERS: dict[str, OptionParser] = {"cache-size": parse_size, "synchronous": _synchronous,
                                     "local-dir": _directory}


@dataclass(frozen=True)
class SQLiteOptions:
    cache_size: int = 64 << 20
    synchronous: str = "off"
    local_dir: str | None = None
    changelog: ChangelogConfig = field(default_factory=ChangelogConfig)

    @classmethod
    def parse(cls, options: dict[str, Any]) -> "SQLiteOptions":
        values = parse_options(options, SETTING_PREFIX, _PARSERS, passed_on=ChangelogConfig.OPTIONS)
        return cls(**values, changelog=ChangelogConfig.parse(options, SETTING_PREFIX))
