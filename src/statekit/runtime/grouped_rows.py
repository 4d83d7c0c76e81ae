"""A batch of rows grouped by key, as a ``KeyedVectorFunction`` receives it: the keys (a
``KeyBatch``, for bulk state access), and the rows sorted by key group and key, each key's rows
contiguous and in input order: key ``i``'s rows are ``rows[offsets[i]:offsets[i + 1]]``.

Sorting and run detection are Arrow compute; per-key aggregates of a column (``counts``,
``first``, ``last``, ``sum``, ``min``, ``max``) are NumPy/Arrow operations over all keys at once,
so a function can process a batch with no Python call per key or per row.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import chain, islice
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit.spi.bulk_state import KeyBatch
from statekit.spi.errors import FunctionResultError
from statekit.spi.key_groups import canonical_key

_REDUCERS = {"sum": np.add, "min": np.minimum, "max": np.maximum}
#: rows whose column values ``GroupedRows.row_runs`` converts to Python at once
ROW_CHUNK = 65_536


class GroupedRows(KeyBatch):
    def __init__(self, keys: Sequence[Any], key_groups: Sequence[int], rows: pa.RecordBatch,
                 offsets: np.ndarray) -> None:
        super().__init__(keys, key_groups)
        #: the rows (the input's columns), sorted by key group and key, input order within a key
        self.rows = rows
        #: ``num_keys + 1`` row positions: key ``i``'s rows are ``rows[offsets[i]:offsets[i + 1]]``
        self.offsets = offsets

    @property
    def num_keys(self) -> int:
        return len(self.keys)

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    def rows_of(self, i: int) -> pa.RecordBatch:
        """The rows of key ``i``."""
        start = int(self.offsets[i])
        return self.rows.slice(start, int(self.offsets[i + 1]) - start)

    def column(self, name: str) -> pa.Array:
        """A column of ``rows``."""
        return self.rows.column(name)

    def counts(self) -> np.ndarray:
        """The number of rows of each key."""
        return np.diff(self.offsets)

    def first(self, name: str) -> pa.Array:
        """Each key's first value of column ``name`` (for a key column: the key's value)."""
        return self.column(name).take(pa.array(self.offsets[:-1]))

    def last(self, name: str) -> pa.Array:
        """Each key's last value of column ``name``."""
        return self.column(name).take(pa.array(self.offsets[1:] - 1))

    def sum(self, name: str) -> np.ndarray:
        return self._reduce(name, "sum")

    def min(self, name: str) -> np.ndarray:
        return self._reduce(name, "min")

    def max(self, name: str) -> np.ndarray:
        return self._reduce(name, "max")

    def _reduce(self, name: str, how: str) -> np.ndarray:
        column = self.column(name)
        if column.null_count:
            raise FunctionResultError(f"GroupedRows.{how}({name!r}): the column has {column.null_count} nulls; fill "
                                      f"them first (pyarrow.compute.fill_null) or aggregate rows_of(i) yourself")
        if self.num_keys == 0:
            return np.zeros(0, dtype=column.type.to_pandas_dtype())
        values = column.to_numpy(zero_copy_only=False)
        reduced = _REDUCERS[how].reduceat(values, self.offsets[:-1])
        if how == "sum" and values.dtype.kind in "iu" and values.dtype.itemsize == 8:
            self._check_no_wrap(name, column, reduced.dtype)
        return reduced

    def _check_no_wrap(self, name: str, column: pa.Array, dtype: np.dtype) -> None:
        """A ``FunctionResultError`` if a key's sum of a 64-bit integer column is outside the
        type (NumPy adds modulo 2**64). Exact sums are computed only when the column's extremes
        times the most rows of a key could leave it."""
        bounds = pc.min_max(column).as_py()
        info = np.iinfo(dtype)
        most = int(self.counts().max())
        if info.min <= bounds["min"] * most and bounds["max"] * most <= info.max:
            return
        exact = np.add.reduceat(column.to_numpy(zero_copy_only=False).astype(object), self.offsets[:-1])
        for i, total in enumerate(exact):
            if not info.min <= total <= info.max:
                raise FunctionResultError(
                    f"GroupedRows.sum({name!r}): the sum of key {self.keys[i]!r} is {total}, past what {dtype} holds "
                    f"([{info.min}, {info.max}]); sum that key's rows as Python ints "
                    f"(sum(rows_of(i).column({name!r}).to_pylist())) or cast the column to float64 first")

    @classmethod
    def of_sorted(cls, rows: pa.RecordBatch, key_columns: Sequence[str], key_groups: pa.Array) -> "GroupedRows":
        """``rows`` grouped: sorted here by ``key_groups`` (the key group of each row) and the key
        columns, stably (input order within a key); runs of equal keys found with Arrow compute."""
        if rows.num_rows == 0:
            return cls([], [], rows, np.zeros(1, dtype=np.int64))
        order = _grouping_order([rows.column(c) for c in key_columns], key_groups)
        rows, key_groups = rows.take(order), key_groups.take(order)
        starts = _run_starts([rows.column(c) for c in key_columns], rows.num_rows)
        key_values = [_key_values(pc.take(rows.column(c), starts)) for c in key_columns]
        keys = key_values[0] if len(key_columns) == 1 else list(zip(*key_values))
        offsets = np.append(starts.to_numpy(), rows.num_rows).astype(np.int64)
        return cls(keys, pc.take(key_groups, starts).to_pylist(), rows, offsets)

    @classmethod
    def of_key_runs(cls, runs: Iterable[tuple[Any, int, list[dict[str, Any]]]]) -> "GroupedRows":
        """From (key, key group, that key's rows as dicts), ordered here by key group and key as
        ``of_sorted`` orders them (keys of types that do not compare with each other, by key group
        only); a column is every name a row has, null in the rows without it."""
        runs = list(runs)
        try:
            ordered = sorted(runs, key=lambda run: (run[1], _sort_key(run[0])))
        except TypeError:  # e.g. str and int keys of one job (a local runner's key selector may mix them)
            ordered = sorted(runs, key=lambda run: run[1])
        rows = [row for _, _, key_rows in ordered for row in key_rows]
        offsets = np.cumsum([0] + [len(key_rows) for _, _, key_rows in ordered]).astype(np.int64)
        names = dict.fromkeys(name for row in rows for name in row)  # from_pylist takes the first row's only
        return cls([key for key, _, _ in ordered], [key_group for _, key_group, _ in ordered],
                   pa.RecordBatch.from_pydict({name: [row.get(name) for row in rows] for name in names}), offsets)

    def row_runs(self) -> Iterator[tuple[Any, int, Iterator[dict[str, Any]]]]:
        """(key, key group, the key's rows as dicts) of every key, in order: the rows are made one
        at a time in a single pass over the batch, so read each key's rows before taking the next key.
        The columns become Python values ``ROW_CHUNK`` rows at a time, as the pass reaches them, so
        that a large batch is never held as Python objects all at once."""
        rows = _dicts(tuple(self.rows.schema.names), self.rows.num_rows, lambda part: self.rows.slice(*part).columns)
        bounds = self.offsets.tolist()
        for i, (key, key_group) in enumerate(zip(self.keys, self.key_groups)):
            yield key, key_group, islice(rows, bounds[i + 1] - bounds[i])

    def side_row_runs(self, input_column: str,
                      input_structs: Sequence[str]) -> Iterator[tuple[Any, int, Iterator[tuple[int, dict[str, Any]]]]]:
        """(key, key group, the key's (input, row) pairs) of a batch of several inputs, in order:
        each row's input is its ``input_column`` (0, 1, ...), its values the fields of the struct
        column ``input_structs[input]`` (each input its own columns). As ``row_runs``, one pass."""
        inputs = self.rows.column(input_column).to_numpy(zero_copy_only=False)
        per_input = []
        for index, name in enumerate(input_structs):
            struct = self.rows.column(name).take(pa.array(np.flatnonzero(inputs == index)))
            per_input.append(_dicts(tuple(field.name for field in struct.type), len(struct),
                                    lambda part, struct=struct: struct.slice(*part).flatten()))
        inputs_in_order = inputs.tolist()
        bounds = self.offsets.tolist()
        for i, (key, key_group) in enumerate(zip(self.keys, self.key_groups)):
            yield key, key_group, ((side, next(per_input[side])) for side in inputs_in_order[bounds[i]:bounds[i + 1]])

    def key_runs(self) -> Iterator[tuple[Any, int, pa.RecordBatch]]:
        """(key, key group, the key's rows) of every key, in order."""
        bounds = self.offsets.tolist()
        rows = self.rows
        for i, (key, key_group) in enumerate(zip(self.keys, self.key_groups)):
            yield key, key_group, rows.slice(bounds[i], bounds[i + 1] - bounds[i])


def output_columns(produced: Any) -> pa.Table | None:
    """A function's output given as columns (a ``RecordBatch``, a ``Table``, or a dict of column
    name to array, list or NumPy array) as a table; None if it is not columns (but rows)."""
    if isinstance(produced, pa.Table):
        return produced
    if isinstance(produced, pa.RecordBatch):
        return pa.Table.from_batches([produced])
    if isinstance(produced, dict):
        try:
            return pa.table(produced)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            lengths = {name: len(column) if hasattr(column, "__len__") else None for name, column in produced.items()}
            raise FunctionResultError(f"process_groups returned columns {lengths} (name: length) that do not make a "
                                      f"table: {exc}. Give every column the same length, as arrays, lists or NumPy "
                                      f"arrays") from exc
    return None


def _grouping_order(key_columns: Sequence[pa.Array], key_groups: pa.Array) -> pa.Array:
    """The row positions of a stable sort by key group and key columns (nulls last). Where every key
    column's equal values are equal bits (integers, strings, ...: not floats, whose NaNs and zeros
    are each one key, nor nested types), found by hashing the rows into keys and sorting only the
    keys: a third of the time of sorting the rows."""
    names = [str(i) for i in range(len(key_columns) + 1)]  # the key group first (a key column may be "kg")
    if not all(_hashes_exactly(column.type) for column in key_columns):
        return pc.sort_indices(pa.table([key_groups, *key_columns], names=names),
                               sort_keys=[(name, "ascending") for name in names])
    positions = pa.array(np.arange(len(key_groups), dtype=np.int64))
    rows = pa.table([key_groups, *key_columns, positions], names=[*names, "positions"])
    keys = rows.group_by(names[1:], use_threads=False).aggregate([(names[0], "min"), ("positions", "list")])
    # a key's rows are listed in input order (one thread); its key group is every one of its rows'
    in_order = pc.sort_indices(keys, sort_keys=[(f"{names[0]}_min", "ascending")] +
                               [(name, "ascending") for name in names[1:]])
    return keys.column("positions_list").take(in_order).combine_chunks().flatten()


def _hashes_exactly(arrow_type: pa.DataType) -> bool:
    return any(is_type(arrow_type) for is_type in (
        pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
        pa.types.is_large_binary, pa.types.is_boolean, pa.types.is_date, pa.types.is_timestamp, pa.types.is_time,
        pa.types.is_duration))


def _dicts(names: tuple[str, ...], length: int,
           columns_of: Callable[[tuple[int, int]], Sequence[pa.Array]]) -> Iterator[dict[str, Any]]:
    """``length`` rows as dicts of ``names``, made one at a time; ``columns_of((start, n))`` gives
    the columns of ``n`` rows from ``start``, converted to Python ``ROW_CHUNK`` rows at a time, as
    the iteration reaches them, so that a large batch is never held as Python objects at once."""
    make = _row_dicts(names)
    return chain.from_iterable(make(*(column.to_pylist() for column in columns_of((start, ROW_CHUNK))))
                               for start in range(0, length, ROW_CHUNK))


@lru_cache(maxsize=64)
def _row_dicts(names: tuple[str, ...]) -> Callable[..., Iterator[dict[str, Any]]]:
    """A function of the columns (lists) named ``names`` that makes each row a dict: compiled per
    schema with the names as literals, which makes a row in half the time of ``to_pylist``."""
    if not names:
        return lambda: iter(())
    values = [f"v{i}" for i in range(len(names))]
    pairs = ", ".join(f"{name!r}: {value}" for name, value in zip(names, values))
    parameters = ", ".join(values)
    return eval(f"lambda {parameters}: ({{{pairs}}} for {parameters}, in zip({parameters}))")  # noqa: S307 - names are repr'd


def _sort_key(key: Any) -> tuple[tuple[int, Any], ...]:
    """Where Arrow's ascending sort puts ``key`` (a scalar, or a tuple of one per key column):
    values in order, then NaN, then null, column by column."""
    parts = key if isinstance(key, tuple) else (key,)
    return tuple((2, 0) if part is None else (1, 0) if part != part else (0, part) for part in parts)


def _key_values(column: pa.Array) -> list[Any]:
    """A key column's values as keys: floats canonical (``canonical_key``), as their runs are."""
    values = column.to_pylist()
    return list(map(canonical_key, values)) if pa.types.is_floating(column.type) else values


def _run_starts(columns: Sequence[pa.Array], length: int) -> pa.Array:
    """Positions where a run of equal keys begins in sorted columns (nulls equal each other, and NaNs)."""
    changed = None
    for column in columns:
        previous, current = column.slice(0, length - 1), column.slice(1)
        try:
            differs = pc.fill_null(pc.not_equal(previous, current), True)
        except pa.ArrowNotImplementedError:  # nested types (struct, list keys): compare in Python
            differs = pa.array([a != b for a, b in zip(previous.to_pylist(), current.to_pylist())])
        same = pc.and_(pc.is_null(previous), pc.is_null(current))
        if pa.types.is_floating(column.type):  # every NaN is one key, as in Spark's grouping and the key group
            same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(previous), pc.is_nan(current)), False))
        differs = pc.and_(differs, pc.invert(same))
        changed = differs if changed is None else pc.or_(changed, differs)
    later = pc.add(pc.indices_nonzero(changed), 1) if changed is not None else pa.array([], pa.uint64())
    return pa.concat_arrays([pa.array([0], pa.uint64()), later.cast(pa.uint64())])
