"""Pre-aggregation (``pre_aggregate=``): rows combined per key in Spark SQL before statekit's
shuffle; the function merges one aggregated row per key and epoch into its state, and ends with
the state a function over every row ends with. Wrong settings fail before any job runs."""
import sys
from collections import defaultdict

import numpy as np
import pytest
from pyspark import cloudpickle

from statekit.conformance_tests.spark import SCHEMA
from statekit.conformance_tests.workload import make_rows
from statekit.runtime import KeyedProcessFunction, KeyedVectorFunction
from statekit.serializers import Int64Serializer
from statekit.spark import process_keyed
from statekit.spi import ConfigurationError, ValueStateDescriptor

pytestmark = pytest.mark.spark
cloudpickle.register_pickle_by_value(sys.modules[__name__])

OUTPUT = "key string, rows long, total long, largest long"
ROWS = ValueStateDescriptor("rows", Int64Serializer(), default=0)
TOTAL = ValueStateDescriptor("total", Int64Serializer(), default=0)
LARGEST = ValueStateDescriptor("largest", Int64Serializer())


class PreAggregatedTotals(KeyedVectorFunction):
    """Row count, sum and maximum of ``amount`` per key, merged from pre-aggregated rows."""

    def open(self, ctx):
        self.rows, self.total, self.largest = (ctx.get_bulk_state(d) for d in (ROWS, TOTAL, LARGEST))

    def process_groups(self, groups, ctx):
        rows = np.add(self.rows.get_many(groups), groups.sum("n"))
        total = np.add(self.total.get_many(groups), groups.sum("amount_sum"))
        largest = [max(m for m in (held, new) if m is not None)
                   for held, new in zip(self.largest.get_many(groups), groups.column("amount_max").to_pylist())]
        self.rows.update_many(groups, rows.tolist())
        self.total.update_many(groups, total.tolist())
        self.largest.update_many(groups, largest)
        return {"key": groups.first("key"), "rows": rows, "total": total, "largest": largest}


class RowTotals(KeyedProcessFunction):
    """The same over every row."""

    def open(self, ctx):
        self.rows, self.total, self.largest = (ctx.get_state(d) for d in (ROWS, TOTAL, LARGEST))

    def process(self, row, ctx):
        rows, total = self.rows.value() + 1, self.total.value() + row["amount"]
        held = self.largest.value()
        largest = row["amount"] if held is None else max(held, row["amount"])
        self.rows.update(rows)
        self.total.update(total)
        self.largest.update(largest)
        yield ctx.current_key, rows, total, largest


def _expected(rows):
    state = defaultdict(lambda: [0, 0, None])
    for key, _, amount in rows:
        held = state[key]
        held[0] += 1
        held[1] += amount
        held[2] = amount if held[2] is None else max(held[2], amount)
    return {key: tuple(v) for key, v in state.items()}


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_pre_aggregated_rows_end_in_the_state_of_every_row(spark, statekit_settings, backend):
    from pyspark.sql import functions as F
    statekit_settings({"backend": backend, "parallelism": 3})
    epochs = [make_rows(600, 40, seed) for seed in (1, 2)]
    aggregates = {"n": F.count("*"), "amount_sum": F.sum("amount"), "amount_max": F.max("amount")}
    for i, rows in enumerate(epochs):
        df = spark.createDataFrame(rows, SCHEMA)
        combined = process_keyed(df, "key", PreAggregatedTotals(), OUTPUT, job_id=f"pre-aggregated-{backend}",
                                 pre_aggregate=aggregates).collect()
        assert len(combined) == len({r[0] for r in rows}), "one output row per key and epoch"
        per_row = process_keyed(df, "key", RowTotals(), OUTPUT, job_id=f"per-row-{backend}").collect()
        want = _expected([r for epoch in epochs[:i + 1] for r in epoch])
        assert {r["key"]: (r["rows"], r["total"], r["largest"]) for r in combined} == \
            {k: v for k, v in want.items() if k in {r[0] for r in rows}}
        last_per_row = {}
        for r in per_row:  # the last output row of each key holds its state after the epoch
            if r["rows"] >= last_per_row.get(r["key"], (0,))[0]:
                last_per_row[r["key"]] = (r["rows"], r["total"], r["largest"])
        assert last_per_row == {k: want[k] for k in last_per_row}


@pytest.mark.parametrize("aggregates,message", [
    ({}, r"give a dict of output column name -> aggregate Column"),
    ({"n": "count(*)"}, r"must map a column name \(str\) to a pyspark Column"),
    ({"key": "COUNT"}, r"are key columns too"),
    ({"n.rows": "COUNT"}, r"have a dot or a backtick in their names"),
])
def test_wrong_pre_aggregates_fail_before_any_job(spark, aggregates, message):
    from pyspark.sql import functions as F
    aggregates = {name: F.count("*") if value == "COUNT" else value for name, value in aggregates.items()}
    df = spark.createDataFrame(make_rows(10, 5, 1), SCHEMA)
    with pytest.raises(ConfigurationError, match=message):
        process_keyed(df, "key", PreAggregatedTotals(), OUTPUT, job_id="bad-pre-aggregate", pre_aggregate=aggregates)


def test_pre_aggregation_refuses_event_time(spark):
    from pyspark.sql import functions as F
    df = spark.createDataFrame(make_rows(10, 5, 1), SCHEMA)
    with pytest.raises(ConfigurationError, match="does not combine with event_time"):
        process_keyed(df, "key", PreAggregatedTotals(), OUTPUT, job_id="bad-pre-aggregate",
                      event_time="amount", watermark_delay="1 minute", pre_aggregate={"n": F.count("*")})


def test_columns_the_aggregation_drops_may_have_names_mapinarrow_refuses(spark, statekit_settings):
    """Only the key columns and the aggregates reach mapInArrow after pre-aggregation: a dotted name
    elsewhere in the input is no reason to refuse the job."""
    from pyspark.sql import functions as F
    statekit_settings({"parallelism": 2})
    rows = make_rows(40, 6, 3)
    df = spark.createDataFrame(rows, SCHEMA).withColumnRenamed("category", "meta.category")
    out = process_keyed(df, "key", PreAggregatedTotals(), OUTPUT, job_id="pre-aggregated-dotted-input",
                        pre_aggregate={"n": F.count("*"), "amount_sum": F.sum("amount"),
                                       "amount_max": F.max("amount")}).collect()
    assert {r["key"]: (r["rows"], r["total"], r["largest"]) for r in out} == _expected(rows)
