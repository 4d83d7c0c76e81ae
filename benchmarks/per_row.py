"""Where a ``KeyedProcessFunction``'s time goes per row, in one process (no Spark): a subtask's
epoch driven as an executor drives it (``spark.task.run_subtask``, Arrow batches in, output
dropped by ``DiscardingSink``), on the rows ``spark_keyed`` runs (``k = v % keys``), and its parts
timed one by one on the same rows.

* The engine's aim (issue 41): statekit with a function that does nothing, against the least any
  per-row Python API does with the same Arrow batches (each row made a dict by ``to_pylist`` and
  passed to an empty function): at most 30% more time, a ratio of rows/s of at least 0.77.
* count + last value per row (``spark_keyed.RowCountAndLast``) against the same loop over a Python
  dict of (count, last) per key: what keyed state costs over the plainest state there is.
* The breakdown (heap, count + last): seconds of each part against the whole epoch: grouping the
  rows by key, making the row dicts, the user's function (its own code, with state calls that do
  nothing), state access and key switches (the function's ``value`` and ``update`` calls on heap
  state), output (the output rows into Arrow), and the rest (the engine's loop, restore,
  snapshot, checkpoint write) as what is left.

``--profile`` prints cProfile's top functions of each backend's count + last epoch. Spark's share
(shuffle and transfer to Python) is measured by ``spark_breakdown``.

    python -m benchmarks.per_row [--rows 1000000] [--keys 100000] [--rounds 3] [--profile] [--json FILE]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from benchmarks.fixtures import BACKENDS, MAX_P
from benchmarks.report import record, report
from benchmarks.spark_keyed import COUNT, LAST, RowCountAndLast
from statekit.registry import backend_class
from statekit.runtime import KeyedProcessFunction
from statekit.sinks import DiscardingSink
from statekit.spark.task import KEY_GROUP_COLUMN, SubtaskSpec, _grouped, _to_batch, run_subtask
from statekit.spi.key_groups import key_groups_for_keys
from statekit.storage.filesystem import FileSystemCheckpointStorage

#: rows per batch as Spark hands them to a subtask (``spark.keyed.ARROW_BATCH_ROWS`` is larger;
#: the subtask joins them up to ``spark.statekit.batch.max-bytes`` either way)
BATCH_ROWS = 10_000
OUTPUT = pa.schema([("k", pa.int64()), ("count", pa.int64()), ("last", pa.int64())])
#: the engine adds at most 30% to the least a per-row API costs: 1 / 1.3
ENGINE_AIM = 0.77


class Nothing(KeyedProcessFunction):
    def process(self, row: Any, ctx: Any) -> None:
        return None


def input_batches(rows: int, keys: int) -> list[pa.RecordBatch]:
    """``rows`` rows ``(k, v)`` with their key groups, in batches as a subtask receives them."""
    v = np.arange(rows, dtype=np.int64)
    k = v % keys
    key_groups = np.array(key_groups_for_keys(list(range(keys)), MAX_P), dtype=np.int32)[k]
    batch = pa.RecordBatch.from_arrays([pa.array(k), pa.array(v), pa.array(key_groups)],
                                       names=["k", "v", KEY_GROUP_COLUMN])
    return [batch.slice(i, BATCH_ROWS) for i in range(0, rows, BATCH_ROWS)]


def epoch_seconds(function: KeyedProcessFunction, backend: str, batches: list[pa.RecordBatch]) -> float:
    """One subtask's epoch over ``batches``, fresh state, incremental checkpoint to local disk."""
    work = tempfile.mkdtemp(prefix="statekit-bench-per-row-")
    try:
        spec = SubtaskSpec(function, backend_class(backend)(), FileSystemCheckpointStorage(f"{work}/checkpoints"),
                           "bench", "op", 1, 1, MAX_P, ("k",), OUTPUT, True, None, None, f"{work}/local",
                           sink=DiscardingSink())
        started = time.perf_counter()
        for _ in run_subtask(spec, 0, iter(batches), lambda acknowledgement: None):
            pass
        return time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)


def dict_rows_into_empty_calls(batches: list[pa.RecordBatch]) -> float:
    """The least a per-row API does: each row a dict (``to_pylist``), one call per row."""
    def process(row: Any, ctx: Any) -> None:
        return None
    started = time.perf_counter()
    for batch in batches:
        for row in batch.to_pylist():
            process(row, None)
    return time.perf_counter() - started


def dict_state_loop(batches: list[pa.RecordBatch]) -> float:
    """count + last per key in a Python dict, one call per row, output tuples in a list."""
    state: dict[int, tuple[int, int]] = {}
    out: list[tuple[int, int, int]] = []

    def process(row: dict[str, Any]) -> None:
        key = row["k"]
        count = state.get(key, (0, 0))[0] + 1
        state[key] = (count, row["v"])
        out.append((key, count, row["v"]))
    started = time.perf_counter()
    for batch in batches:
        for row in batch.to_pylist():
            process(row)
    return time.perf_counter() - started


def best(rounds: int, measure: Callable[[], float]) -> float:
    return min(measure() for _ in range(rounds))


def breakdown(batches: list[pa.RecordBatch], rounds: int) -> dict[str, float]:
    """Seconds of each part of the heap's count + last epoch, each timed on its own, over the rows
    made one at a time as the engine makes them (a part that needs the rows is timed with them,
    less the time of making them)."""
    from statekit.conformance_tests.base import open_keyed_backend

    whole = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
    groups = _grouped(whole, ("k",))

    def rows_only() -> None:
        for _, _, rows in groups.row_runs():
            for _ in rows:
                pass
    making_rows = best(rounds, lambda: _timed(rows_only))
    parts = {"grouping by key": best(rounds, lambda: _timed(lambda: _grouped(whole, ("k",)))),
             "row dicts": making_rows}
    function = RowCountAndLast()
    function.count = function.last = _NoState()
    context = _NoState()

    def calls() -> None:
        process, out = function.process, []
        for key, _, rows in groups.row_runs():
            context.current_key = key
            for row in rows:
                out.extend(process(row, context))
            if len(out) >= BATCH_ROWS:
                out.clear()
    parts["the user's function (its state calls doing nothing)"] = max(
        0.0, best(rounds, lambda: _timed(calls)) - making_rows)
    work = tempfile.mkdtemp(prefix="statekit-bench-per-row-")
    try:
        backend = open_keyed_backend(backend_class("heap")(), work)
        count, last = backend.get_state(COUNT), backend.get_state(LAST)

        def state_access() -> None:
            set_key = backend.set_current_key
            for key, key_group, rows in groups.row_runs():
                set_key(key, key_group)
                for row in rows:
                    count.update(count.value() + 1)
                    last.update(row["v"])
        parts["state access and key switches"] = max(0.0, best(rounds, lambda: _timed(state_access)) - making_rows)
        backend.dispose()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    chunk = [(key, 1, key) for key in range(BATCH_ROWS)]  # output is converted as it comes, a chunk at a time
    parts["output into Arrow"] = best(rounds, lambda: _timed(
        lambda: [_to_batch(chunk, OUTPUT) for _ in range(whole.num_rows // BATCH_ROWS)]))
    return parts


class _NoState:
    """A state whose calls do nothing, and a context of only ``current_key``: what the user's
    function costs without statekit's state."""

    current_key: Any = None

    def value(self) -> int:
        return 0

    def update(self, value: Any) -> None:
        return None


def _timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def profile(batches: list[pa.RecordBatch], backends: tuple[str, ...], top: int = 15) -> None:
    for backend in backends:
        profiler = cProfile.Profile()
        profiler.runcall(epoch_seconds, RowCountAndLast(), backend, batches)
        print(f"--- {backend}: count + last per row, cProfile")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def run(rows: int, keys: int, rounds: int = 3, backends: tuple[str, ...] = BACKENDS) -> list[dict]:
    batches = input_batches(rows, keys)
    size = f"{rows:,} rows/{keys:,} keys"
    details = dict(group="per-row", rows=rows, keys=keys)
    floor = best(rounds, lambda: dict_rows_into_empty_calls(batches))
    plain = best(rounds, lambda: dict_state_loop(batches))
    results = []
    for backend in backends:
        nothing = best(rounds, lambda: epoch_seconds(Nothing(), backend, batches))
        counted = best(rounds, lambda: epoch_seconds(RowCountAndLast(), backend, batches))
        results.append(record(f"per-row {size}: statekit {backend} engine, a function doing nothing vs dict rows "
                              f"into an empty function", rows / nothing, rows / floor, "rows/s", aim=ENGINE_AIM,
                              backend=backend, seconds=nothing, peer_seconds=floor, **details))
        results.append(record(f"per-row {size}: statekit {backend} count + last vs a Python dict of state",
                              rows / counted, rows / plain, "rows/s", backend=backend, seconds=counted,
                              peer_seconds=plain, **details))
        if backend == "heap":
            parts = breakdown(batches, rounds)
            parts["the rest (the engine's loop, restore, snapshot, checkpoint)"] = max(0.0, counted - sum(parts.values()))
            results += [record(f"per-row {size} breakdown, heap count + last: {part} vs the whole epoch", seconds,
                               counted, "s", backend=backend, ns_per_row=round(seconds / rows * 1e9), **details)
                        for part, seconds in parts.items()]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions per backend")
    parser.add_argument("--json")
    args = parser.parse_args()
    backends = tuple(args.backends.split(","))
    if args.profile:
        profile(input_batches(args.rows, args.keys), backends)
    report(run(args.rows, args.keys, args.rounds, backends), args.json)


if __name__ == "__main__":
    main()
