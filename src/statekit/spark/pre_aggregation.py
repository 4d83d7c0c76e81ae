"""Pre-aggregation: each epoch's rows combined per key in Spark SQL before statekit's shuffle
(Flink's local-global aggregation).

``process_keyed(..., pre_aggregate={"count": F.count("*"), "total": F.sum("amount")})`` runs
``groupBy(keys).agg(...)`` on the epoch's rows: Spark aggregates each input partition on the map
side, so its shuffle carries one row per key and partition instead of every row, and the function
gets one row per key per epoch, with the key columns and the named aggregates, which it merges
into its state (a count into a sum, a maximum into a maximum). It pays where many rows share a
key within an epoch and the state is a combinable summary of them; the function must be written
for the aggregated rows. The aggregates are Spark SQL's, with its semantics: nulls skipped by
``sum``/``min``/``max``, ``sum`` failing on overflow under ANSI mode, and order-dependent ones
(``first``, ``last``, ``collect_list``) seeing the rows in shuffle order, not the DataFrame's (use
``max_by``/``min_by`` on an ordering column). Event time does not combine with it: watermarks and
late rows are decided per row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from pyspark.sql import Column, DataFrame

from statekit.spark.key_columns import check_column_names
from statekit.spi.errors import ConfigurationError


@dataclass(frozen=True)
class PreAggregation:
    """The aggregates (output column -> Spark SQL aggregate expression) and the key columns."""

    key_columns: tuple[str, ...]
    aggregates: tuple[tuple[str, Column], ...]

    @classmethod
    def of(cls, aggregates: Mapping[str, Column] | None, key_columns: Sequence[str],
           event_time: str | None) -> "PreAggregation | None":
        if aggregates is None:
            return None
        if not isinstance(aggregates, Mapping) or not aggregates:
            raise ConfigurationError(f"pre_aggregate={aggregates!r}: give a dict of output column name -> "
                                     f"aggregate Column, e.g. {{'count': F.count('*'), 'total': F.sum('amount')}}")
        for name, expression in aggregates.items():
            if not isinstance(name, str) or not isinstance(expression, Column):
                raise ConfigurationError(f"pre_aggregate entry {name!r}: {expression!r} must map a column name "
                                         f"(str) to a pyspark Column aggregate such as F.sum('amount')")
        check_column_names(aggregates, "pre_aggregate")
        clashing = sorted(set(aggregates) & set(key_columns))
        if clashing:
            raise ConfigurationError(f"pre_aggregate columns {clashing} are key columns too: name the aggregates "
                                     f"differently")
        if event_time is not None:
            raise ConfigurationError("pre_aggregate does not combine with event_time: watermarks and late rows are "
                                     "decided per row; aggregate per event-time window in the function instead")
        return cls(tuple(key_columns), tuple(aggregates.items()))

    def apply(self, df: DataFrame) -> DataFrame:
        """One row per key of ``df``: the key columns and the aggregates."""
        return df.groupBy(*self.key_columns).agg(*[expression.alias(name) for name, expression in self.aggregates])
