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

from statekit.backends.common import LOCAL_DIR_OPTION, ChangelogConfig
from statekit.spi.options import Option, OptionSet, choice, size

SETTING_PREFIX = "spark.statekit.backend.sqlite."
OPTIONS = OptionSet(
    SETTING_PREFIX,
    Option("cache-size", size(), 64 << 20, "SQLite page cache of each keyed backend's connection"),
    Option("synchronous", choice("off", "normal", "full"), "off", "fsync policy of commits"),
    LOCAL_DIR_OPTION,
    *ChangelogConfig.OPTIONS,
)


@dataclass(frozen=True)
class SQLiteOptions:
    cache_size: int = 64 << 20
    synchronous: str = "off"
    local_dir: str | None = None
    changelog: ChangelogConfig = field(default_factory=ChangelogConfig)

    @classmethod
    def parse(cls, options: dict[str, Any]) -> "SQLiteOptions":
        values = OPTIONS.parse(options)
        return cls(values["cache-size"], values["synchronous"], values["local-dir"],
                   values.build(ChangelogConfig, "changelog."))
