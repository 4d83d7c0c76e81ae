"""Parsing option values given as strings (Spark conf) into sizes and booleans."""
from __future__ import annotations

from typing import Any

from statekit.spi.errors import ConfigurationError

_SIZE_UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40}


def parse_size(value: Any, setting: str) -> int:
    """Bytes from an int or a string such as ``64m`` / ``1gb``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    text = str(value).strip().lower()
    number = text.rstrip("bkmgt")
    unit = text[len(number):] or "b"
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except (ValueError, KeyError):
        size = -1
    if size <= 0:
        raise ConfigurationError(f"{setting} must be a positive size such as 64m or 1g, got {value!r}")
    return size


def parse_bool(value: Any, setting: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{setting} must be true or false, got {value!r}")
