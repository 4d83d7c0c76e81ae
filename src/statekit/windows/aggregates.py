"""Ready-made aggregate functions for ``windows.aggregate``: ``Count``, ``Sum``, ``Min``, ``Max``,
``Mean``, ``First`` and ``Last``, as SQL's (nulls are skipped; ``Count`` counts rows).

Each is also a ``VectorizedAggregate``: a window job that uses one, with ``value=`` a column name,
aggregates a whole batch of rows per (key, window) with Arrow and merges the result into the
window's accumulator (``windows.batch``), instead of one Python call per row. A combinable
``AggregateFunction`` of your own can do the same by subclassing ``VectorizedAggregate``.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any

import pyarrow.compute as pc

from statekit.spi import AggregateFunction


class VectorizedAggregate(AggregateFunction):
    """An aggregate that a batch of values can also build with Arrow's grouped aggregations: each
    (key, window)'s values are aggregated by ``arrow_aggregations`` and made one accumulator by
    ``accumulator_of``, which ``merge`` then merges into the window's. Both forms must give the
    same accumulator for the same values (up to the rounding of floating-point sums)."""

    #: Arrow hash aggregations of the values (a function name of ``pyarrow.TableGroupBy.aggregate``
    #: and its options, or None), whose results ``accumulator_of`` takes in this order
    arrow_aggregations: tuple[tuple[str, Any], ...] = ()
    #: the accumulator depends on the order of the values (first, last): session windows, which
    #: merge as their elements arrive, then aggregate row by row
    order_sensitive = False
    #: the aggregate reads the element's value (``value=`` of ``windows.aggregate``), not only its presence
    needs_value = True

    @abstractmethod
    def accumulator_of(self, *aggregated: Any) -> Any:
        """One (key, window)'s accumulator from the results of ``arrow_aggregations`` (Python values)."""


class Count(VectorizedAggregate):
    """The number of elements in the window (an ``int`` accumulator; sessions add their counts)."""

    needs_value = False
    arrow_aggregations = (("count", pc.CountOptions("all")),)

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b

    def accumulator_of(self, count: int) -> int:
        return count


class Sum(VectorizedAggregate):
    """The sum of the elements' values (numbers), 0 for none; null values are skipped."""

    arrow_aggregations = (("sum", pc.ScalarAggregateOptions(min_count=0)),)

    def create_accumulator(self) -> Any:
        return 0

    def add(self, value: Any, accumulator: Any) -> Any:
        return accumulator if value is None else accumulator + value

    def get_result(self, accumulator: Any) -> Any:
        return accumulator

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def accumulator_of(self, total: Any) -> Any:
        return total


class Mean(VectorizedAggregate):
    """The mean of the elements' values, None for none; null values are skipped. The accumulator
    is (sum, count)."""

    arrow_aggregations = (("sum", pc.ScalarAggregateOptions(min_count=0)), ("count", pc.CountOptions("only_valid")))

    def create_accumulator(self) -> tuple[Any, int]:
        return (0, 0)

    def add(self, value: Any, accumulator: Any) -> tuple[Any, int]:
        return accumulator if value is None else (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[0] / accumulator[1] if accumulator[1] else None

    def merge(self, a: Any, b: Any) -> tuple[Any, int]:
        return (a[0] + b[0], a[1] + b[1])

    def accumulator_of(self, total: Any, count: int) -> tuple[Any, int]:
        return (total, count)


class _Kept(VectorizedAggregate):
    """One value the window keeps: ``()`` while it has none, else ``(value,)`` (a window whose
    values are all null still has an accumulator, and emits None)."""

    @staticmethod
    def picked_by(aggregation: str) -> tuple[tuple[str, Any], ...]:
        """The Arrow aggregation that picks the kept value of a batch's non-null values."""
        return ((aggregation, pc.ScalarAggregateOptions(skip_nulls=True, min_count=0)),)

    def create_accumulator(self) -> tuple[Any, ...]:
        return ()

    def add(self, value: Any, accumulator: Any) -> tuple[Any, ...]:
        return accumulator if value is None else self.merge(accumulator, (value,))

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[0] if accumulator else None

    def accumulator_of(self, value: Any) -> tuple[Any, ...]:
        return () if value is None else (value,)


class Min(_Kept):
    """The smallest of the elements' values (anything that compares), None for none; nulls skipped."""

    arrow_aggregations = _Kept.picked_by("min")

    def merge(self, a: Any, b: Any) -> tuple[Any, ...]:
        return (min(a[0], b[0]),) if a and b else tuple(a or b)


class Max(_Kept):
    """The largest of the elements' values (anything that compares), None for none; nulls skipped."""

    arrow_aggregations = _Kept.picked_by("max")

    def merge(self, a: Any, b: Any) -> tuple[Any, ...]:
        return (max(a[0], b[0]),) if a and b else tuple(a or b)


class First(_Kept):
    """The first value the window was given (in the order the rows arrived), None for none; nulls skipped."""

    arrow_aggregations = _Kept.picked_by("first")
    order_sensitive = True

    def merge(self, a: Any, b: Any) -> tuple[Any, ...]:
        return tuple(a or b)


class Last(_Kept):
    """The last value the window was given (in the order the rows arrived), None for none; nulls skipped."""

    arrow_aggregations = _Kept.picked_by("last")
    order_sensitive = True

    def merge(self, a: Any, b: Any) -> tuple[Any, ...]:
        return tuple(b or a)
