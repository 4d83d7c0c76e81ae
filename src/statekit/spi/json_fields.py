"""Reading the JSON of checkpoint metadata and state handles, with errors that name the field.

``JsonObject`` and ``JsonArray`` are a ``dict`` and a ``list`` (so handle code written against
plain JSON keeps working) that know their JSON path, e.g. ``$.operators[0].subtasks[1]``. An
object or array read from one (``obj["key"]``, ``obj.get("key")``, ``arr[i]``, iterating an
array) is wrapped in turn; paths are formatted only for an error. A missing key raises
``CorruptStateError`` naming its path instead of ``KeyError``, and the typed getters (``text``,
``integer``, ...) check a field's type and range. ``plain`` turns a value back into plain JSON
values, for fields kept as they are (serializer configs, properties).
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Iterator, NoReturn

from statekit.spi.errors import CorruptStateError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SHOWN = 60  # characters of a bad value quoted in an error
_SCALARS = frozenset({str, int, float, bool, type(None)})


def child_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if _IDENTIFIER.match(key) else f"{path}[{json.dumps(key)}]"


def as_object(value: Any, path: str = "$") -> "JsonObject":
    """``value`` as a ``JsonObject`` (one already wrapped keeps its path)."""
    if isinstance(value, JsonObject):
        return value
    if not isinstance(value, dict):
        malformed(path, "must be an object", value)
    return JsonObject(value, path)


def plain(value: Any) -> Any:
    """``value`` as plain ``dict``/``list`` JSON values (a tuple as a list, as JSON gives it back)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def malformed(path: str, problem: str, value: Any = None, *, show_value: bool = True) -> NoReturn:
    got = ""
    if show_value:
        text = json.dumps(plain(value))
        got = f", got {text if len(text) <= _SHOWN else text[:_SHOWN] + '...'}"
    raise CorruptStateError(f"field {path} {problem}{got}")


class _Fields:
    """What objects (string keys) and arrays (int indices) share: a lazily formatted path, the
    wrapping of children, and typed getters."""

    _parent: "_Fields | None"
    _key: str | int

    def _init_path(self, path: str | None, parent: "_Fields | None", key: str | int) -> None:
        self._root_path, self._parent, self._key = path, parent, key

    @property
    def path(self) -> str:
        if self._parent is None:
            return self._root_path or "$"
        return child_path(self._parent.path, self._key)

    def path_of(self, key: str | int) -> str:
        return child_path(self.path, key)

    def _wrap(self, key: str | int, value: Any) -> Any:
        if value.__class__ in _SCALARS:
            return value
        if isinstance(value, dict):
            return JsonObject(value, parent=self, key=key)
        if isinstance(value, list):
            return JsonArray(value, parent=self, key=key)
        return value

    def _field(self, key: Any) -> Any:
        raise NotImplementedError

    def text(self, key: str | int, *, non_empty: bool = True) -> str:
        value = self._field(key)
        if value.__class__ is not str or (non_empty and not value):
            malformed(self.path_of(key), "must be a non-empty string" if non_empty else "must be a string", value)
        return value

    def integer(self, key: str | int, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self._field(key)
        if value.__class__ is not int:
            malformed(self.path_of(key), "must be an integer", value)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = (f"in [{minimum}, {maximum}]" if minimum is not None and maximum is not None
                      else f">= {minimum}" if minimum is not None else f"<= {maximum}")
            malformed(self.path_of(key), f"must be an integer {bounds}", value)
        return value

    def number(self, key: str | int, minimum: float | None = None) -> float:
        value = self._field(key)
        if value.__class__ not in (int, float):
            malformed(self.path_of(key), "must be a number", value)
        if minimum is not None and not value >= minimum:
            malformed(self.path_of(key), f"must be a number >= {minimum}", value)
        return float(value)

    def boolean(self, key: str | int) -> bool:
        value = self._field(key)
        if not isinstance(value, bool):
            malformed(self.path_of(key), "must be true or false", value)
        return value

    def object(self, key: str | int) -> "JsonObject":
        value = self._field(key)
        if not isinstance(value, JsonObject):
            malformed(self.path_of(key), "must be an object", value)
        return value

    def array(self, key: str | int, length: int | None = None) -> "JsonArray":
        value = self._field(key)
        if not isinstance(value, JsonArray):
            malformed(self.path_of(key), "must be an array", value)
        if length is not None and len(value) != length:
            malformed(self.path_of(key), f"must have {length} elements, not {len(value)}", show_value=False)
        return value


class JsonObject(dict, _Fields):  # type: ignore[misc]
    def __init__(self, data: dict[str, Any], path: str | None = None, *, parent: _Fields | None = None,
                 key: str | int = "") -> None:
        super().__init__(data)
        self._init_path(path, parent, key)

    def __getitem__(self, key: str) -> Any:
        return self._wrap(key, super().__getitem__(key))

    def __missing__(self, key: str) -> NoReturn:
        malformed(self.path_of(key), "is missing", show_value=False)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[key] if key in self else default

    def _field(self, key: Any) -> Any:
        if key not in self:
            self.__missing__(key)
        return self._wrap(key, dict.__getitem__(self, key))

    def has(self, key: str) -> bool:
        """The field is present and not null."""
        return self.get(key) is not None

    def expect_fields(self, required: Iterable[str], optional: Iterable[str] = ()) -> "JsonObject":
        """Check the object has every ``required`` field and no field outside both lists."""
        required = tuple(required)
        for name in required:
            if name not in self:
                self.__missing__(name)
        known = set(required) | set(optional)
        unknown = sorted(set(self) - known)
        if unknown:
            malformed(self.path, f"has unknown field(s) {unknown}; expected only {sorted(known)}",
                      show_value=False)
        return self

    def objects(self) -> list[tuple[str, "JsonObject"]]:
        """``(name, object)`` for every field, each of which must be an object."""
        return [(name, self.object(name)) for name in self]


class JsonArray(list, _Fields):  # type: ignore[misc]
    def __init__(self, data: list[Any], path: str | None = None, *, parent: _Fields | None = None,
                 key: str | int = "") -> None:
        super().__init__(data)
        self._init_path(path, parent, key)

    def __getitem__(self, index: Any) -> Any:
        value = super().__getitem__(index)
        return value if isinstance(index, slice) else self._wrap(index, value)

    def __iter__(self) -> Iterator[Any]:
        return (self._wrap(i, value) for i, value in enumerate(super().__iter__()))

    def _field(self, key: Any) -> Any:
        if not 0 <= key < len(self):
            malformed(self.path, f"has {len(self)} elements; element {key} is missing", show_value=False)
        return self._wrap(key, list.__getitem__(self, key))

    def objects(self) -> list["JsonObject"]:
        """Every element, each of which must be an object."""
        return [self.object(i) for i in range(len(self))]

    def arrays(self, length: int | None = None) -> list["JsonArray"]:
        """Every element, each of which must be an array (of ``length`` elements)."""
        return [self.array(i, length) for i in range(len(self))]
