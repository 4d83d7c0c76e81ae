"""The jobs of ``jobs/connect_client.py`` (a Spark Connect client) and their plain-Python oracles,
shared by that client and ``test_spark_connect.py``, which runs the same jobs on a classic session."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from statekit.conformance_tests.spark import epochs as workload_epochs
from statekit.conformance_tests.timer_workload import make_timed_epochs
from statekit.runtime import KeyedProcessFunction
from statekit.serializers import Int64Serializer
from statekit.spi import ValueStateDescriptor

TIMED_INPUT = "key string, ts long"
TIMED_OUTPUT = "kind string, key string, ts long, n long"
PRE_AGGREGATED_OUTPUT = "key string, rows long, total long"
ROWS = ValueStateDescriptor("rows", Int64Serializer(), default=0)
TOTAL = ValueStateDescriptor("total", Int64Serializer(), default=0)
#: a bootstrapped total per key, and an epoch adding to some of them (and to keys without one)
BOOTSTRAP = [(f"k{i}", i * 10) for i in range(12)]
BOOTSTRAP_INPUT = [(f"k{i}", i) for i in range(0, 16, 2)]


#: the fields of statekit's metrics a streaming query's progress is checked for
PROGRESS_FIELDS = ("checkpoint_id", "rows_in", "rows_out", "keys_touched", "keys_exact", "state_entries",
                   "state_entries_exact", "timers_pending")


def settings(work: Path) -> dict[str, Any]:
    """The ``spark.statekit.*`` settings of every job (without the prefix)."""
    return {"checkpoint.storage": "filesystem", "checkpoint.dir": (work / "checkpoints").as_uri(),
            "checkpoint.incremental": "true", "max-parallelism": "128", "local.dir": str(work / "local"),
            "savepoint.dir": (work / "savepoints").as_uri()}


def epochs() -> list[list[tuple]]:
    """Three epochs of the conformance workload: two in the first run, one after the restart."""
    return workload_epochs(3, seed=900)


def timed_epochs() -> list[list[tuple]]:
    return make_timed_epochs(4, 100, 20, seed=31)


class PreAggregatedCounts(KeyedProcessFunction):
    """Rows and total amount per key, merged from one pre-aggregated row per key and epoch."""

    def open(self, ctx):
        self.rows, self.total = ctx.get_state(ROWS), ctx.get_state(TOTAL)

    def process(self, row, ctx):
        self.rows.update(self.rows.value() + row["n"])
        self.total.update(self.total.value() + row["amount_sum"])
        yield ctx.current_key, self.rows.value(), self.total.value()


def pre_aggregated_oracle(rows: list[tuple]) -> list[tuple]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key, _, amount in rows:
        counts[key][0] += 1
        counts[key][1] += amount
    return sorted((key, n, total) for key, (n, total) in counts.items())


class AddToTotal(KeyedProcessFunction):
    """Adds each row's amount to the key's total (bootstrapped by ``write_savepoint``)."""

    def open(self, ctx):
        self.total = ctx.get_state(TOTAL)

    def process(self, row, ctx):
        self.total.update(self.total.value() + row["amount"])
        yield ctx.current_key, self.total.value()


class WrongType(KeyedProcessFunction):
    """Returns a float for the output's bigint column."""

    def process(self, row, ctx):
        yield ctx.current_key, 1.5


def bootstrap_oracle() -> list[tuple]:
    initial = dict(BOOTSTRAP)
    return sorted((key, initial.get(key, 0) + amount) for key, amount in BOOTSTRAP_INPUT)
