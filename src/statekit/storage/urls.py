"""fsspec URLs as statekit opens them: a bad URL or a failed operation is a statekit error that
names the setting the location came from."""
from __future__ import annotations

import sys
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


def storage_errors() -> tuple[type[BaseException], ...]:
    """What a failed file-system operation raises, for ``except storage_errors() as exc:`` (called
    only when an exception is raised): ``OSError``, and an object store's lost or refused
    connection, which botocore raises as its own errors (s3fs passes them on after its retries)."""
    exceptions = sys.modules.get("botocore.exceptions")  # imported by s3fs; never imported here
    if exceptions is None:
        return (OSError,)
    return (OSError, exceptions.ConnectionError, exceptions.HTTPClientError)


def io_failure(action: str, path: str, exc: BaseException, setting: str) -> str:
    """The message of a failed file-system operation: what, where, why, and the setting to check."""
    if not isinstance(exc, OSError):  # a connection to an object store
        return (f"cannot {action} {path}: the connection to its storage failed ({type(exc).__name__}: {exc}); the "
                f"location comes from {setting}: check that the storage's endpoint is reachable from here (the "
                f"endpoint_url of the storage options, a proxy, the network) and run the job again")
    return (f"cannot {action} {path} ({type(exc).__name__}: {exc}); the location comes from {setting}: check that "
            f"it exists, that this process may write there and that its file system has space")
