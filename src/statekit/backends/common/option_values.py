"""Parsing backend options given as strings (Spark conf): sizes, booleans, and whole option sets."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from statekit.spi.errors import ConfigurationError

#: parses one option's value; called with the value and the full setting name (for errors)
OptionParser = Callable[[Any, str], Any]
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


def parse_options(options: Mapping[str, Any], prefix: str, parsers: Mapping[str, OptionParser],
                  passed_on: Iterable[str] = ()) -> dict[str, Any]:
    """Parse the options of ``prefix`` (e.g. ``spark.statekit.backend.lmdb.``) into
    ``{python_name: value}`` with each option's parser (``_`` may stand for ``-`` in a name).

    Options named in ``passed_on`` are skipped (another parser reads them, e.g.
    ``ChangelogConfig.OPTIONS``); any other unknown name is a ``ConfigurationError`` listing the
    known ones."""
    passed_on = tuple(passed_on)
    values: dict[str, Any] = {}
    for raw_name, value in options.items():
        if raw_name in passed_on:
            continue
        name = str(raw_name).replace("_", "-")
        parser = parsers.get(name)
        if parser is None:
            raise ConfigurationError(f"unknown option {prefix}{raw_name}; known: "
                                     f"{', '.join(sorted([*parsers, *passed_on]))}")
        values[name.replace("-", "_")] = parser(value, prefix + name)
    return values
