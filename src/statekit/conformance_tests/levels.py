"""The level (capability area) of a conformance test: where its test function is defined."""
from __future__ import annotations

from typing import Any

PACKAGE = "statekit.conformance_tests"
#: in report order; a mixin class sets ``conformance_level`` where its module holds several levels
LEVELS = ("semantics", "snapshots", "incremental", "rescale", "storage", "spark")
OTHER = "other"


def level_of(item: Any) -> str:
    """The level of a collected test item; ``OTHER`` for tests not defined by the suite's mixins."""
    cls = getattr(item, "cls", None)
    name = getattr(item, "originalname", None)
    for klass in cls.__mro__ if cls is not None else ():
        if name in vars(klass):
            module = klass.__module__
            if module.startswith(PACKAGE + "."):
                return getattr(klass, "conformance_level", module.rsplit(".", 1)[1])
            return OTHER
    return OTHER
