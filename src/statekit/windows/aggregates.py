"""Ready-made aggregate functions for ``windows.aggregate``."""
from __future__ import annotations

from typing import Any

from statekit.spi import AggregateFunction


class Count(AggregateFunction):
    """The number of elements in the window (an ``int`` accumulator; sessions add their counts)."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class Sum(AggregateFunction):
    """The sum of the elements' values (``value=`` of ``windows.aggregate``; numbers), 0 for none."""

    def create_accumulator(self) -> Any:
        return 0

    def add(self, value: Any, accumulator: Any) -> Any:
        return accumulator + value

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        return a + b
