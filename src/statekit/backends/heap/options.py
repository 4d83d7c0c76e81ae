"""Options of the ``heap`` backend, parsed from ``spark.statekit.backend.heap.*``: the changelog
bounds of its incremental snapshots (``ChangelogConfig.OPTIONS``) and the compression of its snapshot files
(``snapshot-compression``)."""
from __future__ import annotations

from statekit.backends.common.canonical import SNAPSHOT_COMPRESSION_OPTION
from statekit.backends.common.changelog import ChangelogConfig
from statekit.spi.options import OptionSet

SETTING_PREFIX = "spark.statekit.backend.heap."
OPTIONS = OptionSet(SETTING_PREFIX, *ChangelogConfig.OPTIONS, SNAPSHOT_COMPRESSION_OPTION)
