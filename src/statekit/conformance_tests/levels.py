"""The level (capability area) of a conformance test: the module or subpackage of the suite that
defines its test function."""
from __future__ import annotations

from typing import Any

PACKAGE = "statekit.conformance_tests"
#: in report order; a mixin class sets ``conformance_level`` where its module holds several levels
LEVELS = ("semantics", "snapshots", "incremental", "rescale", "migration", "ttl", "timers", "storage", "spark")
OTHER = "other"


def level_of(item: Any) -> str:
    """The level of a collected test item; ``OTHER`` for tests not defined by the suite's mixins."""
    cls = getattr(item, "cls", None)
    name = getattr(item, "originalname", None)
    for klass in cls.__mro__ if cls is not None else ():
        if name in vars(klass):
            module = klass.__module__
            if module.startswith(PACKAGE + "."):
                return getattr(klass, "conformance_level", module[len(PACKAGE) + 1:].split(".")[0])
            return OTHER
    return OTHER
