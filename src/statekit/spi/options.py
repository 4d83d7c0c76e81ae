"""Typed options: one declaration (name, parser, default, doc) per setting.

statekit's own ``spark.statekit.*`` settings, every backend's ``spark.statekit.backend.<name>.*``
options and every storage's ``spark.statekit.checkpoint.<name>.*`` options are declared with
``Option`` and parsed by an ``OptionSet``, and so are a plugin's::

    OPTIONS = OptionSet("spark.statekit.backend.sqlite.",
                        Option("cache-size", size(), 64 << 20, "SQLite page cache per connection"),
                        Option("synchronous", choice("off", "normal", "full"), "off", "fsync policy"))
    values = OPTIONS.parse(options)   # {"cache-size": 67108864, "synchronous": "off"}

Values arrive as strings (Spark conf) or as Python values (code); option names are written
kebab-case and ``_`` may stand for ``-`` (``cache_size=...`` from Python). An unknown name, a
name given twice or a value its parser rejects is a ``ConfigurationError`` naming the full
setting and the accepted form.
"""
from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping, TypeVar

from statekit.spi.errors import ConfigurationError

#: parses one value; called with the value and the full setting name (for errors)
Parser = Callable[[Any, str], Any]
T = TypeVar("T")

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30,
               "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
#: larger sizes are a mistake (a unit typed twice, ``inf``), not a configuration
MAX_SIZE = 1 << 40


@dataclass(frozen=True)
class Option:
    """One setting: ``name`` after the set's prefix (kebab-case, dots for groups), its parser,
    the value when it is not given, and a one-line description."""

    name: str
    parser: Parser
    default: Any = None
    doc: str = ""


class OptionValues(dict):
    """Parsed values by option name, defaults filled in."""

    def build(self, cls: type[T], group: str = "") -> T:
        """The dataclass ``cls`` from the values of its fields: field ``x_y`` takes option
        ``<group>x-y`` (fields without such an option keep their default)."""
        names = {f.name: group + f.name.replace("_", "-") for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{field: self[name] for field, name in names.items() if name in self})


class OptionSet:
    """The options of one component under ``prefix`` (e.g. ``spark.statekit.backend.lmdb.``)."""

    def __init__(self, prefix: str, *options: Option) -> None:
        self.prefix = prefix
        self.options: dict[str, Option] = {}
        for option in options:
            if option.name in self.options:
                raise ConfigurationError(f"option {prefix}{option.name} is declared twice")
            self.options[option.name] = option

    def setting(self, name: str) -> str:
        """The full setting name of option ``name``."""
        return self.prefix + name

    def known(self) -> str:
        return ", ".join(self.setting(name) for name in sorted(self.options))

    def parse(self, given: Mapping[str, Any]) -> OptionValues:
        """Every declared option's value: parsed from ``given`` or its default."""
        values = OptionValues()
        seen: dict[str, str] = {}
        for raw_name, value in given.items():
            name = str(raw_name).replace("_", "-")
            option = self.options.get(name)
            if option is None:
                raise ConfigurationError(self.unknown(str(raw_name)))
            if name in seen:
                raise ConfigurationError(f"{self.setting(name)} is given twice (as {seen[name]!r} and "
                                         f"{raw_name!r}); give it once")
            seen[name] = str(raw_name)
            values[name] = option.parser(value, self.setting(name))
        for name, option in self.options.items():
            values.setdefault(name, option.default)
        return values

    def unknown(self, name: str) -> str:
        """The message for an unknown option ``name``: the known ones, and the closest."""
        close = difflib.get_close_matches(name.replace("_", "-"), list(self.options), n=1)
        hint = f" (did you mean {self.setting(close[0])}?)" if close else ""
        return f"unknown setting {self.setting(name)}{hint}; known: {self.known() or 'none'}"


# ---------------------------------------------------------------------------- parsers


def _text_of(value: Any) -> str:
    return str(value).strip()


def size(minimum: int = 1, maximum: int = MAX_SIZE) -> Parser:
    """Bytes, from an int or a string such as ``64m``, ``1.5g``, ``20k`` or ``4096``."""
    def parse(value: Any, setting: str) -> int:
        number: float | None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        else:
            text = _text_of(value).lower()
            digits = text.rstrip("bkmgt")
            try:
                number = float(digits) * _SIZE_UNITS[text[len(digits):]]
            except (ValueError, KeyError):
                number = None
        if number is None or not math.isfinite(number) or not minimum <= number <= maximum:
            raise ConfigurationError(f"{setting} must be a size in bytes from {_bytes(minimum)} to {_bytes(maximum)}, "
                                     f"written like 4096, 64m or 1g, got {value!r}")
        return int(number)
    return parse


def _bytes(count: int) -> str:
    for unit, scale in (("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale}{unit}"
    return str(count)


def integer(minimum: int | None = None, maximum: int | None = None) -> Parser:
    """A whole number in ``[minimum, maximum]``."""
    def parse(value: Any, setting: str) -> int:
        try:
            number = value if isinstance(value, int) and not isinstance(value, bool) else int(_text_of(value))
        except ValueError:
            number = None
        if number is None or (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
            raise ConfigurationError(f"{setting} must be a whole number{_range(minimum, maximum)}, got {value!r}")
        return number
    return parse


def number(minimum: float | None = None, maximum: float | None = None, *, positive: bool = False) -> Parser:
    """A finite number in ``[minimum, maximum]`` (above 0 when ``positive``)."""
    def parse(value: Any, setting: str) -> float:
        try:
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            result = float(value if numeric else _text_of(value))
        except ValueError:
            result = math.nan
        if (not math.isfinite(result) or (positive and result <= 0) or (minimum is not None and result < minimum)
                or (maximum is not None and result > maximum)):
            bound = " above 0" if positive else _range(minimum, maximum)
            raise ConfigurationError(f"{setting} must be a finite number{bound}, got {value!r}")
        return result
    return parse


def _range(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum} to {maximum}"
    if minimum is not None:
        return f" of at least {minimum}"
    return f" of at most {maximum}" if maximum is not None else ""


def boolean(value: Any, setting: str) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``)."""
    if isinstance(value, bool):
        return value
    text = _text_of(value).lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{setting} must be true or false, got {value!r}")


def choice(*accepted: str) -> Parser:
    """One of ``accepted`` (case-insensitive); returns it in the declared spelling."""
    by_lower = {a.lower(): a for a in accepted}

    def parse(value: Any, setting: str) -> str:
        found = by_lower.get(_text_of(value).lower())
        if found is None:
            raise ConfigurationError(f"{setting} must be one of {', '.join(accepted)}, got {value!r}")
        return found
    return parse


def text(value: Any, setting: str) -> str:
    """A non-empty string."""
    if value is None or not _text_of(value):
        raise ConfigurationError(f"{setting} must not be empty, got {value!r}")
    return str(value).strip()


def local_directory(value: Any, setting: str) -> str:
    """A path on this machine's disk that is, or can become, a directory: nothing on the way
    to it may be a regular file."""
    path = text(value, setting)
    if "://" in path:
        raise ConfigurationError(f"{setting} must be a local directory path (no URL scheme), got {value!r}")
    probe = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if os.path.exists(probe) and not os.path.isdir(probe):
        raise ConfigurationError(f"{setting}={path!r} cannot be a directory: {probe} is a file; choose a directory "
                                 f"path on local disk")
    return path
