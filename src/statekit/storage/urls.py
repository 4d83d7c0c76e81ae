"""fsspec URLs as statekit opens them: a bad URL or a failed operation is a statekit error that
names the setting the location came from."""
from __future__ import annotations

from typing import Any

import fsspec

from statekit.spi.errors import ConfigurationError

CHECKPOINT_DIR_SETTING = "spark.statekit.checkpoint.dir"


def open_url(url: str, setting: str = CHECKPOINT_DIR_SETTING,
             storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system and path of ``url``, or a ConfigurationError naming ``setting``."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"{setting} must be a directory URL such as file:///data/checkpoints or "
                                 f"s3://bucket/checkpoints, got {url!r}")
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ValueError, ImportError) as exc:
        raise ConfigurationError(
            f"{setting}={url!r} cannot be opened: {exc}. Use a URL scheme fsspec knows (file, s3, gs, "
            f"memory, hdfs, ...) and install its package (e.g. `pip install statekit[s3]` for s3://)") from exc
    return fs, path.rstrip("/") or "/"


def io_failure(action: str, path: str, exc: BaseException, setting: str) -> str:
    """The message of a failed file-system operation: what, where, why, and the setting to check."""
    return (f"cannot {action} {path} ({type(exc).__name__}: {exc}); the location comes from {setting}: check that "
            f"it exists, that this process may write there and that its file system has space")
