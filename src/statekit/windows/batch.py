"""The window operator's vectorized path, in NumPy and Arrow compute: a batch's rows assigned to
their windows (aligned windows: tumbling and sliding), or to the sessions they make within the
batch, and their values aggregated once per (key, window) by a ``VectorizedAggregate``.

The operator (``windows.operator``) then merges each (key, window)'s accumulator into the window's
state and asks the trigger, as it does for a row: the Python work is per (key, window) of the
batch, not per row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.runtime.event_time import milliseconds
from statekit.windows.aggregates import VectorizedAggregate


def event_times_ms(column: pa.Array) -> np.ndarray | None:
    """An event-time column as epoch milliseconds (int64, nulls as 0: ``has_nulls`` marks them),
    or None if it is neither a timestamp nor an integer column: such rows go row by row, where
    ``event_time_ms`` names what is wrong."""
    if not (pa.types.is_timestamp(column.type) or pa.types.is_integer(column.type)):
        return None
    if pa.types.is_unsigned_integer(column.type) and column.type.bit_width == 64:
        return None  # beyond int64: row by row, which refuses what no timestamp holds
    try:
        return milliseconds(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    except pa.ArrowInvalid:  # e.g. nanoseconds that microseconds cannot hold: as the rows' datetimes round them
        return None


@dataclass(frozen=True)
class WindowGroups:
    """The (key, window) pairs of a batch's rows, in order of key index and window start, each
    with its accumulator: key ``keys[i]``'s window ``[starts[i], ends[i])`` gets ``accumulators[i]``."""

    keys: list[int]
    starts: list[int]
    ends: list[int]
    accumulators: list[Any]


def aligned_windows(rows: np.ndarray, times: np.ndarray, size: int, slide: int,
                    offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, window start) of every window of ``size`` starting every ``slide`` (``offset`` from the
    epoch) that each row at ``times`` belongs to, in the order of ``rows`` (a window's values keep
    the rows' order): one per row for tumbling windows (``slide == size``). The times are within a
    window's size of neither end of the 64-bit range."""
    last_start = times - np.mod(times - offset, slide)
    if slide >= size:
        return rows, last_start
    positions, starts = [], []
    for back in range(-(-size // slide)):  # the windows of a row: ceil(size / slide) at most
        start = last_start - back * slide
        inside = start > times - size
        positions.append(rows[inside])
        starts.append(start[inside])
    positions, starts = np.concatenate(positions), np.concatenate(starts)
    in_order = np.argsort(positions, kind="stable")
    return positions[in_order], starts[in_order]


def sessions(key_index: np.ndarray, times: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                         np.ndarray]:
    """The sessions the rows make within the batch, per key: windows ``[t, t + gap)`` that
    intersect (or touch, as ``TimeWindow.intersects`` says) are one. Returns (the rows' positions
    in time order within each key, each of them its session's number, and per session: its key
    index and its bounds as [start, end) packed in an (n, 2) array)."""
    order = np.lexsort((times, key_index))
    sorted_times, sorted_keys = times[order], key_index[order]
    begins = np.ones(len(order), dtype=bool)
    begins[1:] = (sorted_keys[1:] != sorted_keys[:-1]) | (np.diff(sorted_times) > gap)
    firsts = np.flatnonzero(begins)
    lasts = np.append(firsts[1:] - 1, len(order) - 1)
    bounds = np.stack([sorted_times[firsts], sorted_times[lasts] + gap], axis=1)
    return order, np.cumsum(begins) - 1, sorted_keys[firsts], bounds


class NotAggregated(Exception):
    """Arrow would not aggregate the values as the per-row path does: they go row by row."""


def aggregated(function: VectorizedAggregate, groups: np.ndarray, values: pa.Array) -> list[Any]:
    """The accumulator of each group of ``values`` (``groups``: each value's group number, 0 to
    ``n - 1``, every number present), in group order; within a group the values keep their order.
    ``NotAggregated`` where an integer sum could leave 64 bits: Arrow's wraps around, Python's
    per-row sum does not."""
    if pa.types.is_integer(values.type) and any(name == "sum" for name, _ in function.arrow_aggregations):
        bounds = pc.min_max(values).as_py()
        largest = max(abs(bounds["min"] or 0), abs(bounds["max"] or 0))
        if largest * len(values) > np.iinfo(np.int64).max:
            raise NotAggregated(f"an integer sum of {len(values)} values up to {largest} could overflow")
    table = pa.table({"group": groups, "value": values})
    specs = [("value", name, options) for name, options in function.arrow_aggregations]
    result = table.group_by("group", use_threads=False).aggregate(specs)
    result = result.take(np.argsort(result.column("group").to_numpy(), kind="stable"))
    parts = [result.column(f"value_{name}").to_pylist() for name, _ in function.arrow_aggregations]
    return [function.accumulator_of(*group_parts) for group_parts in zip(*parts)]


def window_groups(function: VectorizedAggregate, key_index: np.ndarray, starts: np.ndarray, size: int,
                  values: pa.Array) -> WindowGroups:
    """The (key, window) pairs of rows assigned to windows of ``size`` (``key_index``, ``starts``:
    one entry per row and window, ``values`` the rows' values in the same order)."""
    pairs = np.stack([key_index, starts], axis=1)
    unique, group = np.unique(pairs, axis=0, return_inverse=True)
    accumulators = aggregated(function, group.reshape(-1), values)
    return WindowGroups(unique[:, 0].tolist(), unique[:, 1].tolist(), (unique[:, 1] + size).tolist(), accumulators)


def values_of(column: pa.Array | None, positions: Sequence[int] | np.ndarray) -> pa.Array:
    """The values at ``positions`` of the value column, or (an aggregate that reads none) the positions."""
    taken = pa.array(np.asarray(positions, dtype=np.int64))
    return taken if column is None else column.take(taken)
