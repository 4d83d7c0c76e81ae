"""What a join emits: the kinds of join, and the function that makes an output row of a pair."""
from __future__ import annotations

import enum
from typing import Any, Callable

from statekit.spi.errors import ConfigurationError

#: makes the output row of a matched pair, or of one side alone in an outer join (the other None);
#: returns the row, or None to emit nothing for the pair
JoinFunction = Callable[[Any, Any], Any]


class JoinType(str, enum.Enum):
    """Which rows a join emits besides the matched pairs: none (inner), the unmatched rows of the
    first input (left outer), of the second (right outer), or of both (full outer)."""

    INNER = "inner"
    LEFT_OUTER = "left_outer"
    RIGHT_OUTER = "right_outer"
    FULL_OUTER = "full_outer"

    @classmethod
    def of(cls, how: Any) -> "JoinType":
        try:
            return cls(how)
        except ValueError:
            raise ConfigurationError(f"how= must be one of {[t.value for t in cls]}, got {how!r}") from None

    def keeps_unmatched(self, side: int) -> bool:
        """Whether the unmatched rows of input ``side`` (0: left, 1: right) are emitted."""
        return self is JoinType.FULL_OUTER or self is (JoinType.LEFT_OUTER, JoinType.RIGHT_OUTER)[side]


def pair_function(join: JoinFunction | None) -> JoinFunction:
    """The output of a pair: ``join(left, right)``, by default the pair itself."""
    if join is None:
        return lambda left, right: (left, right)
    if not callable(join):
        raise ConfigurationError(f"join= must be a function (left row, right row) -> output row, got {join!r}")
    return join
