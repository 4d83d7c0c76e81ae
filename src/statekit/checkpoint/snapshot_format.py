"""The checkpoint property that says a full checkpoint is in its backend's native format
(``SnapshotFormat.NATIVE``): read back by that backend only, shown by ``statekit checkpoints describe``."""
from __future__ import annotations

from typing import Any

from statekit.spi.backend import SnapshotFormat, StateBackend

FORMAT_PROPERTY = "format"


def format_property(state_backend: StateBackend, incremental: bool, requested: SnapshotFormat) -> dict[str, Any]:
    """``{"format": "native"}`` for a full checkpoint the backend writes natively, else nothing."""
    native = (requested is SnapshotFormat.NATIVE and state_backend.capabilities.native_snapshots
              and not (incremental and state_backend.capabilities.incremental_snapshots))
    return {FORMAT_PROPERTY: SnapshotFormat.NATIVE.value} if native else {}
