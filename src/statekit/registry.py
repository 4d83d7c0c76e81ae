"""The one registry of backends and storages (fsspec's ``registry`` is the model).

A name resolves, in this order, to: a class registered at run time (``register_backend`` /
``register_storage``), a built-in, an entry point of group ``statekit.backends`` /
``statekit.storages`` (how a plugin package registers), or a ``module:Class`` spec. Entry points
are read once per process and cached; ``refresh`` reads them again (after installing a plugin in a
running process).

Handle types: a backend or storage module registers its state-handle types when it is imported,
and checkpoint metadata may be read (by the CLI, on a restart) before the plugin that wrote it was
used. ``load_handle_types`` imports every known backend and storage module; the metadata reader
calls it when it meets an unknown handle type.
"""
from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar, Union

from statekit.spi.backend import StateBackend
from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import on_unknown_handle_type
from statekit.spi.storage import CheckpointStorage

BACKEND_GROUP = "statekit.backends"
STORAGE_GROUP = "statekit.storages"

_BUILTINS: dict[str, dict[str, str]] = {
    BACKEND_GROUP: {
        "heap": "statekit.backends.heap:HeapStateBackend",
        "rocksdb": "statekit.backends.rocksdb:RocksDBStateBackend",
        "lmdb": "statekit.backends.lmdb:LMDBStateBackend",
    },
    STORAGE_GROUP: {
        "jobmanager": "statekit.storage.memory:JobManagerCheckpointStorage",
        "filesystem": "statekit.storage.filesystem:FileSystemCheckpointStorage",
    },
}
_BASES: dict[str, type] = {BACKEND_GROUP: StateBackend, STORAGE_GROUP: CheckpointStorage}
#: classes (or ``module:Class`` specs) registered at run time, by group and name
_REGISTERED: dict[str, dict[str, Union[type, str]]] = {BACKEND_GROUP: {}, STORAGE_GROUP: {}}
_ENTRY_POINTS: dict[str, dict[str, EntryPoint]] = {}

C = TypeVar("C", bound=type)


def register_backend(name: str, cls: type[StateBackend] | str, clobber: bool = False) -> None:
    """Make ``name`` select ``cls`` (a class or ``"module:Class"``) in ``spark.statekit.backend``."""
    _register(BACKEND_GROUP, name, cls, clobber)


def register_storage(name: str, cls: type[CheckpointStorage] | str, clobber: bool = False) -> None:
    """Make ``name`` select ``cls`` in ``spark.statekit.checkpoint.storage``."""
    _register(STORAGE_GROUP, name, cls, clobber)


def backend_class(name: str, setting: str = "spark.statekit.backend") -> type[StateBackend]:
    return _resolve(BACKEND_GROUP, name, setting)


def storage_class(name: str, setting: str = "spark.statekit.checkpoint.storage") -> type[CheckpointStorage]:
    return _resolve(STORAGE_GROUP, name, setting)


def available_backends() -> list[str]:
    return _names(BACKEND_GROUP)


def available_storages() -> list[str]:
    return _names(STORAGE_GROUP)


def refresh() -> None:
    """Forget the cached entry points (read again on next use)."""
    _ENTRY_POINTS.clear()


def load_handle_types() -> None:
    """Import every known backend and storage module, so that their handle types are registered.
    A plugin that fails to import is passed over here; it fails with its own error where it is selected."""
    for group in (BACKEND_GROUP, STORAGE_GROUP):
        for name in _names(group):
            try:
                _resolve(group, name, name)
            except ConfigurationError:
                continue


# ---------------------------------------------------------------------------- internals


def _register(group: str, name: str, cls: type | str, clobber: bool) -> None:
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigurationError(f"a plugin name must be a non-empty string without ':', got {name!r}")
    if isinstance(cls, type) and not issubclass(cls, _BASES[group]):
        raise ConfigurationError(f"{cls!r} is not a {_BASES[group].__name__} subclass")
    taken = _REGISTERED[group].get(name) or _BUILTINS[group].get(name) or _entry_points(group).get(name)
    if taken is not None and not clobber and taken != cls:
        raise ConfigurationError(f"{name!r} is already registered in {group} (as {_describe(taken)}); pass "
                                 f"clobber=True to replace it")
    _REGISTERED[group][name] = cls


def _names(group: str) -> list[str]:
    return sorted(set(_REGISTERED[group]) | set(_BUILTINS[group]) | set(_entry_points(group)))


def _entry_points(group: str) -> dict[str, EntryPoint]:
    found = _ENTRY_POINTS.get(group)
    if found is None:
        found = _ENTRY_POINTS[group] = {ep.name: ep for ep in entry_points(group=group)}
    return found


def _resolve(group: str, name: str, setting: str) -> Any:
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"{setting} must be a name, got {name!r}")
    registered = _REGISTERED[group].get(name)
    plugins = _entry_points(group)
    if registered is not None:
        cls = registered if isinstance(registered, type) else _load(registered, setting)
    elif name in _BUILTINS[group]:
        cls = _load(_BUILTINS[group][name], setting)
    elif name in plugins:
        try:
            cls = plugins[name].load()
        except Exception as exc:  # a broken plugin: say which
            raise ConfigurationError(f"{setting}={name!r}: its entry point {plugins[name].value!r} failed to "
                                     f"load: {exc}") from exc
    elif ":" in name:
        cls = _load(name, setting)
    else:
        raise ConfigurationError(f"{setting}={name!r} is unknown; accepted: {', '.join(_names(group))}, an entry "
                                 f"point in group {group!r}, or 'module:Class'")
    base = _BASES[group]
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigurationError(f"{setting}={name!r} refers to {cls!r}, which is not a {base.__name__} subclass")
    return cls


def _load(spec: str, setting: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"{setting}={spec!r} cannot be loaded: {exc}") from exc
    except Exception as exc:  # the module itself raised on import: a plugin's bug, say which
        raise ConfigurationError(f"{setting}={spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    return target


def _describe(target: Any) -> str:
    if isinstance(target, EntryPoint):
        return f"entry point {target.value}"
    return target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"


on_unknown_handle_type(load_handle_types)
