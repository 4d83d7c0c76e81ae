"""A deterministic keyed workload that uses every state kind, and its pure-Python oracle.

The function keeps, per key: a count (value), the last values (list), sums per category
(map), a running max (reducing) and a mean (aggregating); per subtask: the number of rows it
processed (operator list state), the epochs seen (union list state) and a broadcast map. The
oracle computes the keyed part without any state backend, so comparing the two after
checkpoints, failures and rescaling checks every key and every value.
"""
from __future__ import annotations

import random

import numpy as np
from collections import Counter
from typing import Any, Iterable, Iterator

from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.runtime.function import (
    CheckpointedFunction, FunctionInitializationContext, FunctionSnapshotContext, KeyedBatchFunction,
    KeyedContext, KeyedProcessFunction, KeyedVectorFunction,
)
from statekit.runtime.grouped_rows import GroupedRows
from statekit.serializers import Int64Serializer, StringSerializer
from statekit.spi import (
    AggregateFunction, KeyBatch, AggregatingStateDescriptor, KeyedStateBackend, ListStateDescriptor,
    MapStateDescriptor, ReducingStateDescriptor, StateBackend, ValueStateDescriptor,
)
from statekit.spi.storage import CheckpointStreams

LAST_N = 3
CATEGORIES = ("a", "b", "c", "d")
#: the category of a row that clears its key's state (``make_rows`` never makes one)
CLEAR = "clear"

Row = tuple[str, str, int]  # (key, category, amount)


class Mean(AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, accumulator: list[int]) -> list[int]:
        accumulator[0] += value  # in place on purpose: backends must not leak this into snapshots
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator: list[int]) -> float:
        return accumulator[0] / accumulator[1]


def _max(a: int, b: int) -> int:
    return a if a >= b else b


COUNT = ValueStateDescriptor("count", Int64Serializer(), default=0)
LAST = ListStateDescriptor("last", Int64Serializer())
SUMS = MapStateDescriptor("sums", StringSerializer(), Int64Serializer())
MAXIMUM = ReducingStateDescriptor("max", _max, Int64Serializer())
MEAN = AggregatingStateDescriptor("mean", Mean())


class WorkloadFunction(KeyedProcessFunction, CheckpointedFunction):
    def initialize_state(self, ctx: FunctionInitializationContext) -> None:
        self.rows_seen = ctx.operator_state.get_list_state("rows-seen", Int64Serializer())
        self.epochs = ctx.operator_state.get_union_list_state("epochs", Int64Serializer())
        self.config = ctx.operator_state.get_broadcast_state("config")
        self.restored = ctx.is_restored
        self.processed = 0

    def open(self, ctx: KeyedContext) -> None:
        self.epoch = ctx.checkpoint_id
        self.count = ctx.get_state(COUNT)
        self.last = ctx.get_state(LAST)
        self.sums = ctx.get_state(SUMS)
        self.maximum = ctx.get_state(MAXIMUM)
        self.mean = ctx.get_state(MEAN)
        self.config.put("categories", list(CATEGORIES))

    def process(self, row: Row | dict[str, Any], ctx: KeyedContext) -> Iterator[tuple[str, int]]:
        if isinstance(row, dict):  # rows from a DataFrame: columns key, category, amount
            category, amount = row["category"], row["amount"]
        else:
            _, category, amount = row
        if category == CLEAR:
            for state in (self.count, self.last, self.sums, self.maximum, self.mean):
                state.clear()
            self.processed += 1
            yield ctx.current_key, 0
            return
        count = self.count.value() + 1
        self.count.update(count)
        last = self.last.get()[-(LAST_N - 1):] + [amount]
        self.last.update(last)
        self.sums.put(category, (self.sums.get(category) or 0) + amount)
        self.maximum.add(amount)
        self.mean.add(amount)
        self.processed += 1
        yield ctx.current_key, count

    def snapshot_state(self, ctx: FunctionSnapshotContext) -> None:
        self.rows_seen.add(self.processed)
        self.processed = 0
        if ctx.checkpoint_id not in self.epochs.get():
            self.epochs.add(ctx.checkpoint_id)


class FailOnce(WorkloadFunction):
    """The workload, failing subtask 1 once (for failure-injection tests): after ``after_rows``
    rows, or with ``after_rows=None`` in close(), after its snapshot was uploaded but before the
    driver heard of it. ``marker`` is a file path all workers see; it records the failure."""

    def __init__(self, marker: str, after_rows: int | None) -> None:
        self.marker = marker
        self.after_rows = after_rows

    def _fail_once(self) -> None:
        import os
        if self.subtask == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("injected failure")

    def open(self, ctx):
        super().open(ctx)
        self.subtask = ctx.subtask_index
        self.rows = 0

    def process(self, row, ctx):
        self.rows += 1
        if self.after_rows is not None and self.rows == self.after_rows:
            self._fail_once()
        yield from super().process(row, ctx)

    def close(self):
        if self.after_rows is None:
            self._fail_once()


class WorkloadBatchFunction(WorkloadFunction, KeyedBatchFunction):
    """The workload as a ``KeyedBatchFunction``: the same state and output, one call per key and
    batch of rows."""

    def process_rows(self, key: Any, rows: Any, ctx: KeyedContext) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for row in rows.to_pylist():
            out.extend(self.process(row, ctx))
        return out


class WorkloadVectorFunction(WorkloadFunction, KeyedVectorFunction):
    """The workload as a ``KeyedVectorFunction``: the same state and output, one call per batch of
    rows grouped by key, every state read and written in bulk (the mean adds one value per row:
    a key repeated in a bulk call, in row order)."""

    def open(self, ctx: KeyedContext) -> None:
        super().open(ctx)
        self.bulk = {d.name: ctx.get_bulk_state(d) for d in (COUNT, LAST, SUMS, MAXIMUM, MEAN)}

    def process_groups(self, groups: GroupedRows, ctx: KeyedContext) -> dict[str, Any]:
        count, last, sums = self.bulk[COUNT.name], self.bulk[LAST.name], self.bulk[SUMS.name]
        counts, offsets = groups.counts(), groups.offsets
        before = np.array(count.get_many(groups), dtype=np.int64)
        count.update_many(groups, (before + counts).tolist())
        amounts = groups.column("amount").to_pylist()
        categories = groups.column("category").to_pylist()
        per_key = [amounts[offsets[i]:offsets[i + 1]] for i in range(groups.num_keys)]
        last.update_many(groups, [(held + new)[-LAST_N:] for held, new in zip(last.get_many(groups), per_key)])
        added: dict[tuple[int, str], int] = {}
        for i in range(groups.num_keys):
            for row in range(offsets[i], offsets[i + 1]):
                added[(i, categories[row])] = added.get((i, categories[row]), 0) + amounts[row]
        pairs = KeyBatch([groups.keys[i] for i, _ in added], [groups.key_groups[i] for i, _ in added])
        held = sums.get_many(pairs, [category for _, category in added])
        sums.put_many(pairs, [category for _, category in added],
                      [(h or 0) + total for h, total in zip(held, added.values())])
        self.bulk[MAXIMUM.name].add_many(groups, groups.max("amount").tolist())
        rows = KeyBatch(np.repeat(np.array(groups.keys, dtype=object), counts).tolist(),
                        np.repeat(groups.key_groups, counts).tolist())
        self.bulk[MEAN.name].add_many(rows, amounts)
        self.processed += groups.num_rows
        position = np.arange(groups.num_rows) - np.repeat(offsets[:-1], counts)
        return {"key": groups.column("key"), "count": np.repeat(before, counts) + position + 1}


def make_rows(n_rows: int, n_keys: int, seed: int) -> list[Row]:
    rng = random.Random(seed)
    return [(f"key-{rng.randrange(n_keys)}", rng.choice(CATEGORIES), rng.randrange(-50, 1000))
            for _ in range(n_rows)]


KeyState = dict[str, Any]


def oracle(rows: list[Row], into: dict[str, KeyState] | None = None) -> dict[str, KeyState]:
    """The keyed state ``WorkloadFunction`` must hold after processing ``rows`` in order."""
    state = into if into is not None else {}
    for key, category, amount in rows:
        if category == CLEAR:
            state.pop(key, None)
            continue
        s = state.setdefault(key, {"count": 0, "last": [], "sums": {}, "max": None, "mean": [0, 0]})
        s["count"] += 1
        s["last"] = (s["last"] + [amount])[-LAST_N:]
        s["sums"][category] = s["sums"].get(category, 0) + amount
        s["max"] = amount if s["max"] is None else max(s["max"], amount)
        s["mean"] = [s["mean"][0] + amount, s["mean"][1] + 1]
    return state


def oracle_cells(rows: list[Row]) -> list[tuple[str, str, Any, str]]:
    """The cells a reader finds in a snapshot of ``WorkloadFunction``'s keyed state after ``rows``,
    as (state, key, user key, repr of the value): one per value, list element and map entry."""
    cells = []
    for key, s in oracle(rows).items():
        cells += [(state.name, key, None, repr(s[state.name])) for state in (COUNT, MAXIMUM, MEAN)]
        cells += [(LAST.name, key, None, repr(element)) for element in s[LAST.name]]
        cells += [(SUMS.name, key, category, repr(total)) for category, total in s[SUMS.name].items()]
    return cells


def cell_rows(cells: Iterable[Any]) -> list[tuple[str, Any, Any, str]]:
    """``StateCell`` s read from a snapshot, in the form of ``oracle_cells``."""
    return [(cell.state, cell.key, cell.user_key, repr(cell.value)) for cell in cells]


def read_key_state(backend: KeyedStateBackend, key: str) -> KeyState:
    """The workload's state of one key, read through the backend (the key must be current)."""
    mean = backend.get_state(MEAN).get()
    total = backend.get_state(COUNT).value()
    return {"count": total, "last": backend.get_state(LAST).get(),
            "sums": dict(backend.get_state(SUMS).items()), "max": backend.get_state(MAXIMUM).get(),
            "mean": mean}


def expected_key_state(s: KeyState) -> KeyState:
    return {**s, "mean": s["mean"][0] / s["mean"][1]}


def expected_state(rows: list[Row]) -> dict[str, KeyState]:
    """What ``dump_state`` must find after ``rows`` were processed in order."""
    return {key: expected_key_state(s) for key, s in oracle(rows).items()}


def expected_outputs(rows: list[Row], history: list[Row]) -> list[tuple[str, int]]:
    """The ``(key, count)`` rows ``WorkloadFunction`` emits for ``rows`` after ``history``."""
    counts: Counter[str] = Counter()
    outputs = []
    for index, (key, category, _) in enumerate([*history, *rows]):
        counts[key] = 0 if category == CLEAR else counts[key] + 1  # a cleared count starts again
        if index >= len(history):
            outputs.append((key, counts[key]))
    return outputs


def dump_state(metadata: CheckpointMetadata, streams: CheckpointStreams, local_dir: str, *,
               state_backend: StateBackend | None = None, parallelism: int | None = None,
               operator_id: str = "keyed-process") -> dict[str, KeyState]:
    """Every key's workload state in a checkpoint or savepoint, restored subtask by subtask at
    ``parallelism`` (default: the snapshot's own) into ``state_backend`` (default: heap)."""
    from statekit.backends.heap import HeapStateBackend
    from statekit.conformance_tests.base import open_keyed_backend, set_key

    operator = metadata.operator(operator_id)
    backend_factory = state_backend or HeapStateBackend()
    parallelism = parallelism or operator.parallelism
    found: dict[str, KeyState] = {}
    for index in range(parallelism):
        restore = assign(operator, index, parallelism)
        backend = open_keyed_backend(backend_factory, f"{local_dir}/dump-{index}", subtask_index=index,
                                     parallelism=parallelism, max_parallelism=operator.max_parallelism,
                                     restore_handles=restore.keyed, restore_streams=streams,
                                     job_id=metadata.job_id, operator_id=operator_id)
        try:
            for key in backend.keys(COUNT.name):
                assert key not in found, f"key {key!r} restored by two subtasks"
                set_key(backend, key)
                found[key] = read_key_state(backend, key)
        finally:
            backend.dispose()
    return found
