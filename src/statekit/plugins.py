"""Finding backends and storages by name: built-in short names, entry points, ``module:Class``.

Plugins register in the entry-point groups ``statekit.backends`` and ``statekit.storages``
(fsspec's registry is the model). Built-ins are listed here so they resolve without relying on
installed package metadata.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from statekit.spi.backend import StateBackend
from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import BACKEND_GROUP, STORAGE_GROUP
from statekit.spi.storage import CheckpointStorage

BUILTIN_BACKENDS = {
    "heap": "statekit.backends.heap:HeapStateBackend",
    "rocksdb": "statekit.backends.rocksdb:RocksDBStateBackend",
    "lmdb": "statekit.backends.lmdb:LMDBStateBackend",
}
BUILTIN_STORAGES = {
    "jobmanager": "statekit.storage.memory:JobManagerCheckpointStorage",
    "filesystem": "statekit.storage.filesystem:FileSystemCheckpointStorage",
}


def _entry_point_names(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def _load_target(spec: str, setting: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"{setting}={spec!r} cannot be loaded: {exc}") from exc
    return target


def resolve_class(name: str, group: str, builtins: dict[str, str], base: type, setting: str) -> type:
    """The class ``name`` refers to: a built-in, an entry point of ``group``, or ``module:Class``."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{setting} must be a name, got {name!r}")
    plugins = _entry_point_names(group)
    if name in builtins:
        cls = _load_target(builtins[name], setting)
    elif name in plugins:
        try:
            cls = plugins[name].load()
        except Exception as exc:  # a broken plugin: say which
            raise ConfigurationError(f"{setting}={name!r}: its entry point {plugins[name].value!r} failed to "
                                     f"load: {exc}") from exc
    elif ":" in name:
        cls = _load_target(name, setting)
    else:
        accepted = sorted(set(builtins) | set(plugins))
        raise ConfigurationError(f"{setting}={name!r} is unknown; accepted: {', '.join(accepted)}, an entry "
                                 f"point in group {group!r}, or 'module:Class'")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigurationError(f"{setting}={name!r} refers to {cls!r}, which is not a {base.__name__} subclass")
    return cls


def backend_class(name: str, setting: str = "spark.statekit.backend") -> type[StateBackend]:
    return resolve_class(name, BACKEND_GROUP, BUILTIN_BACKENDS, StateBackend, setting)


def storage_class(name: str, setting: str = "spark.statekit.checkpoint.storage") -> type[CheckpointStorage]:
    return resolve_class(name, STORAGE_GROUP, BUILTIN_STORAGES, CheckpointStorage, setting)


def available_backends() -> list[str]:
    return sorted(set(BUILTIN_BACKENDS) | set(_entry_point_names(BACKEND_GROUP)))


def available_storages() -> list[str]:
    return sorted(set(BUILTIN_STORAGES) | set(_entry_point_names(STORAGE_GROUP)))
