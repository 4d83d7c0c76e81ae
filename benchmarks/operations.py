"""Per-operation cost of every state kind, per backend, next to the raw library loop doing the
equivalent work, in the same run on the same keys.

statekit goes through the state API: ``set_current_key`` (key group precomputed, as the engine
supplies it) and then the operation. The raw side is the floor a hand-written loop reaches:

* heap: a Python dict of the same objects (a list per key for list state, a dict per key for
  map state);
* rocksdb: rocksdict in raw mode with the backend's own options (block cache, bloom filter,
  compression), the same stored bytes (the backend's key layout, precomputed; 8-byte
  integers; list elements length-prefixed in one value; one entry per map entry), ``get`` and
  ``put`` and a bounded ``items`` scan;
* lmdb: py-lmdb with the backend's environment flags, one write transaction over the phase
  (as the backend keeps one open) and a cursor's ``get``/``put``/``set_range``.

Operations: Value get+update; List add (4 per key) and get; Map put, get and iterate (10
entries per key; iterate counts entries); Reducing add (a sum) and get; Aggregating add (a sum
through an ``AggregateFunction``) and get. The raw side of the last two calls the same reduce and
aggregate functions over its store: get, combine, put. Each round builds fresh stores for both sides,
interleaved, and each phase keeps its best round.

    python -m benchmarks.operations [--backends heap,rocksdb,lmdb] [--keys N] [--ops N] [--rounds N] [--cpu-time]
                                    [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from benchmarks.fixtures import BACKENDS, MAX_P, keyed_backend
from benchmarks.report import record, report
from statekit.backends.common.key_layout import cell_key, key_group_prefix
from statekit.serializers import Int64Serializer
from statekit.spi import (
    AggregateFunction, AggregatingStateDescriptor, KeyBatch, ListStateDescriptor, MapStateDescriptor,
    ReducingStateDescriptor, ValueStateDescriptor, key_group_for_key,
)

PHASES = {"value": "ValueState get+update", "list_add": "ListState add", "list_get": "ListState get",
          "map_put": "MapState put", "map_get": "MapState get", "map_iterate": "MapState iterate",
          "reducing_add": "ReducingState add", "reducing_get": "ReducingState get",
          "aggregating_add": "AggregatingState add", "aggregating_get": "AggregatingState get",
          "value_bulk": "bulk ValueState get_many+update_many"}
#: the raw side of a bulk phase is the raw loop of its per-key phase (the same reads and writes)
RAW_PHASE = {"value_bulk": "value"}
RAW_NAMES = {"heap": "dict", "rocksdb": "rocksdict", "lmdb": "py-lmdb"}
LIST_LENGTH = 4
MAP_SIZE = 10
_INT = struct.Struct(">Q")  # Int64Serializer's width; the raw side skips its sign flip
_LIST_ELEMENT_PREFIX = b"\x08"  # varint(8): the backend's length prefix of an 8-byte element
STATES = ("value", "list", "map", "reducing", "aggregating")


def add(a: int, b: int) -> int:
    """The reduce function of both sides."""
    return a + b


class Sum(AggregateFunction[int, int, int]):
    """The aggregate function of both sides."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: int, accumulator: int) -> int:
        return accumulator + value

    def get_result(self, accumulator: int) -> int:
        return accumulator


SUM = Sum()


@dataclass(frozen=True)
class Workload:
    keys: list[str]
    groups: list[int]
    n_ops: int

    @classmethod
    def of(cls, n_keys: int, n_ops: int) -> "Workload":
        keys = [f"user-{i}" for i in range(n_keys)]
        return cls(keys, [key_group_for_key(k, MAX_P) for k in keys], n_ops)

    @property
    def order(self) -> list[int]:
        return [i % len(self.keys) for i in range(self.n_ops)]

    @property
    def map_keys(self) -> range:
        return range(max(1, len(self.keys) // MAP_SIZE))

    def ops(self, phase: str) -> int:
        if phase.startswith("map_"):
            return len(self.map_keys) * MAP_SIZE
        return {"list_add": len(self.keys) * LIST_LENGTH, "list_get": len(self.keys), "reducing_get": len(self.keys),
                "aggregating_get": len(self.keys)}.get(phase, self.n_ops)

    def stored_keys(self) -> list[bytes]:
        """The backend's stored key of every key's cell (void namespace)."""
        return [cell_key(key_group_prefix(g), k.encode(), b"") for k, g in zip(self.keys, self.groups)]


#: the clock of every phase: wall time, or with ``--cpu-time`` this thread's CPU time (both sides
#: run every phase on the calling thread; on a shared machine it is not inflated by waiting for a core)
_clock = time.perf_counter


def _timed(phases: dict[str, Callable[[], Any]]) -> dict[str, float]:
    seconds = {}
    for phase, run in phases.items():
        started = _clock()
        run()
        seconds[phase] = _clock() - started
    return seconds


def _statekit(backend_name: str, work: str, w: Workload) -> dict[str, float]:
    backend = keyed_backend(backend_name, os.path.join(work, "statekit"))
    try:
        value = backend.get_state(ValueStateDescriptor("value", Int64Serializer(), default=0))
        lst = backend.get_state(ListStateDescriptor("list", Int64Serializer()))
        mapping = backend.get_state(MapStateDescriptor("map", Int64Serializer(), Int64Serializer()))
        reducing = backend.get_state(ReducingStateDescriptor("reducing", add, Int64Serializer()))
        aggregating = backend.get_state(AggregatingStateDescriptor("aggregating", SUM, Int64Serializer()))
        bulk = backend.get_bulk_state(ValueStateDescriptor("bulk", Int64Serializer(), default=0))
        set_key, keys, groups, order = backend.set_current_key, w.keys, w.groups, w.order
        # LMDB's open write transaction is committed at the end of a writing phase, as on the raw side
        commit = backend.store.commit if backend_name == "lmdb" else (lambda: None)

        def value_phase() -> None:
            for i in order:
                set_key(keys[i], groups[i])
                value.update(value.value() + 1)
            commit()

        def list_add() -> None:
            for _ in range(LIST_LENGTH):
                for i in range(len(keys)):
                    set_key(keys[i], groups[i])
                    lst.add(i)
            commit()

        def list_get() -> None:
            for i in range(len(keys)):
                set_key(keys[i], groups[i])
                lst.get()

        def map_put() -> None:
            for i in w.map_keys:
                set_key(keys[i], groups[i])
                for u in range(MAP_SIZE):
                    mapping.put(u, i)
            commit()

        def map_get() -> None:
            for i in w.map_keys:
                set_key(keys[i], groups[i])
                for u in range(MAP_SIZE):
                    mapping.get(u)

        def map_iterate() -> None:
            for i in w.map_keys:
                set_key(keys[i], groups[i])
                for _ in mapping.items():
                    pass

        def adds(state: Any) -> Callable[[], None]:
            def phase() -> None:
                for i in order:
                    set_key(keys[i], groups[i])
                    state.add(i)
                commit()
            return phase

        def gets(state: Any) -> Callable[[], None]:
            def phase() -> None:
                for i in range(len(keys)):
                    set_key(keys[i], groups[i])
                    state.get()
            return phase

        by_group = sorted(range(len(keys)), key=groups.__getitem__)
        batch_keys, batch_groups = [keys[i] for i in by_group], [groups[i] for i in by_group]

        def value_bulk() -> None:
            """The value phase's accesses in batches of every key once, ordered by key group (as a
            vector function gets them), each batch new (no stored keys cached from an earlier one)."""
            for _ in range(0, len(order), len(keys)):
                batch = KeyBatch(batch_keys, batch_groups)
                bulk.update_many(batch, [v + 1 for v in bulk.get_many(batch)])
            commit()

        return _timed({"value": value_phase, "list_add": list_add, "list_get": list_get, "map_put": map_put,
                       "map_get": map_get, "map_iterate": map_iterate, "reducing_add": adds(reducing),
                       "reducing_get": gets(reducing), "aggregating_add": adds(aggregating),
                       "aggregating_get": gets(aggregating), "value_bulk": value_bulk})
    finally:
        backend.dispose()


def _raw_dict(w: Workload) -> dict[str, float]:
    values: dict[str, int] = {}
    lists: dict[str, list[int]] = {}
    maps: dict[str, dict[int, int]] = {}
    keys, order = w.keys, w.order

    def value_phase() -> None:
        get = values.get
        for i in order:
            key = keys[i]
            values[key] = get(key, 0) + 1

    def list_add() -> None:
        get = lists.get
        for _ in range(LIST_LENGTH):
            for i in range(len(keys)):
                elements = get(keys[i])
                if elements is None:
                    lists[keys[i]] = [i]
                else:
                    elements.append(i)

    def list_get() -> None:
        for key in keys:
            list(lists.get(key, ()))

    def map_put() -> None:
        get = maps.get
        for i in w.map_keys:
            mapping = get(keys[i])
            if mapping is None:
                mapping = maps[keys[i]] = {}
            for u in range(MAP_SIZE):
                mapping[u] = i

    def map_get() -> None:
        for i in w.map_keys:
            mapping = maps.get(keys[i])
            for u in range(MAP_SIZE):
                mapping.get(u)

    def map_iterate() -> None:
        for i in w.map_keys:
            for _ in maps[keys[i]].items():
                pass

    reduced: dict[str, int] = {}
    aggregated: dict[str, int] = {}

    def reducing_add() -> None:
        get = reduced.get
        for i in order:
            key = keys[i]
            current = get(key)
            reduced[key] = i if current is None else add(current, i)

    def reducing_get() -> None:
        get = reduced.get
        for key in keys:
            get(key)

    def aggregating_add() -> None:
        get = aggregated.get
        for i in order:
            key = keys[i]
            accumulator = get(key)
            aggregated[key] = SUM.add(i, SUM.create_accumulator() if accumulator is None else accumulator)

    def aggregating_get() -> None:
        get = aggregated.get
        for key in keys:
            accumulator = get(key)
            None if accumulator is None else SUM.get_result(accumulator)

    return _timed({"value": value_phase, "list_add": list_add, "list_get": list_get, "map_put": map_put,
                   "map_get": map_get, "map_iterate": map_iterate, "reducing_add": reducing_add,
                   "reducing_get": reducing_get, "aggregating_add": aggregating_add,
                   "aggregating_get": aggregating_get})


class _RawStore:
    """A raw library's ``get``, ``put`` and prefix ``scan`` on the table chosen by ``use`` (one per
    state, as the backends keep them), and the end-of-phase ``commit``."""

    get: Callable[[bytes], bytes | None]
    put: Callable[[bytes, bytes], Any]

    def use(self, table: str) -> None:
        raise NotImplementedError

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        raise NotImplementedError

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Rocksdict(_RawStore):
    def __init__(self, path: str) -> None:
        from rocksdict import Rdict

        from statekit.backends.rocksdb.options import RocksDBOptions

        self._options = RocksDBOptions()
        self._db = Rdict(path, self._options.db_options())
        self._db.set_write_options(self._options.write_options())  # as the backend: no write-ahead log
        self._tables: dict[str, Any] = {}

    def use(self, table: str) -> None:
        if table not in self._tables:
            self._tables[table] = self._db.create_column_family(table, self._options.column_family_options())
        self._table = self._tables[table]
        self.get, self.put = self._table.get, self._table.put

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        from rocksdict import ReadOptions

        options = ReadOptions()
        options.set_iterate_upper_bound(prefix[:-1] + bytes([prefix[-1] + 1]))
        # rocksdict's iterator does not keep its ReadOptions (which own the bound) alive: freed, the
        # bound is garbage and the scan stopped after one entry of ten
        self._scan_options = options
        return self._table.items(from_key=prefix, read_opt=options)

    def close(self) -> None:
        self._tables.clear()
        self._table = None
        self._db.close()


class _Lmdb(_RawStore):
    def __init__(self, path: str) -> None:
        import lmdb

        self._env = lmdb.open(path, map_size=1 << 30, max_dbs=len(STATES), sync=False, metasync=False, readahead=False)
        self._dbs = {name: self._env.open_db(name.encode()) for name in STATES}
        self._txn = self._env.begin(write=True)

    def use(self, table: str) -> None:
        self._table = table
        self._cursor = self._txn.cursor(self._dbs[table])
        self.get, self.put = self._cursor.get, self._cursor.put

    def commit(self) -> None:
        self._txn.commit()
        self._txn = self._env.begin(write=True)
        self.use(self._table)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        cursor = self._cursor
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                yield key, value

    def close(self) -> None:
        self._txn.commit()
        self._env.close()


def increment_counters(get: Callable[[bytes], bytes | None], put: Callable[[bytes, bytes], Any],
                       stored: list[bytes], order: list[int]) -> None:
    """The raw ValueState get+update: read, increment and write an 8-byte counter per access."""
    pack, unpack = _INT.pack, _INT.unpack
    for i in order:
        key = stored[i]
        data = get(key)
        put(key, pack((unpack(data)[0] if data is not None else 0) + 1))


def _raw_bytes(store: _RawStore, w: Workload) -> dict[str, float]:
    stored, order = w.stored_keys(), w.order
    pack, unpack, unpack_from = _INT.pack, _INT.unpack, _INT.unpack_from

    def value_phase() -> None:
        store.use("value")
        increment_counters(store.get, store.put, stored, order)
        store.commit()

    def list_add() -> None:
        store.use("list")
        get, put = store.get, store.put
        for _ in range(LIST_LENGTH):
            for i in range(len(stored)):
                key = stored[i]
                put(key, (get(key) or b"") + _LIST_ELEMENT_PREFIX + pack(i))
        store.commit()

    def list_get() -> None:
        get = store.get
        for key in stored:
            data = get(key)
            [unpack_from(data, p)[0] for p in range(1, len(data), 9)]

    def map_put() -> None:
        store.use("map")
        put = store.put
        for i in w.map_keys:
            prefix, value = stored[i], pack(i)
            for u in range(MAP_SIZE):
                put(prefix + pack(u), value)
        store.commit()

    def map_get() -> None:
        get = store.get
        for i in w.map_keys:
            prefix = stored[i]
            for u in range(MAP_SIZE):
                unpack(get(prefix + pack(u)))

    def map_iterate() -> None:
        scan = store.scan
        for i in w.map_keys:
            start = len(stored[i])
            for key, value in scan(stored[i]):
                unpack_from(key, start), unpack(value)

    def reducing_add() -> None:
        store.use("reducing")
        get, put = store.get, store.put
        for i in order:
            key = stored[i]
            data = get(key)
            put(key, pack(i if data is None else add(unpack(data)[0], i)))
        store.commit()

    def aggregating_add() -> None:
        store.use("aggregating")
        get, put, create, aggregate = store.get, store.put, SUM.create_accumulator, SUM.add
        for i in order:
            data = get(stored[i])
            accumulator = create() if data is None else unpack(data)[0]
            put(stored[i], pack(aggregate(i, accumulator)))
        store.commit()

    def reducing_get() -> None:
        get = store.get
        for key in stored:
            data = get(key)
            None if data is None else unpack(data)[0]

    def aggregating_get() -> None:
        get, result = store.get, SUM.get_result
        for key in stored:
            data = get(key)
            None if data is None else result(unpack(data)[0])

    seconds = _timed({"value": value_phase, "list_add": list_add, "list_get": list_get, "map_put": map_put,
                      "map_get": map_get, "map_iterate": map_iterate, "reducing_add": reducing_add,
                      "reducing_get": reducing_get, "aggregating_add": aggregating_add,
                      "aggregating_get": aggregating_get})
    store.use("map")
    scanned = sum(1 for i in w.map_keys for _ in store.scan(stored[i]))
    if scanned != w.ops("map_iterate"):
        raise RuntimeError(f"the raw map scan read {scanned} entries, not {w.ops('map_iterate')}: its timing is void")
    return seconds


def _raw(backend_name: str, work: str, w: Workload) -> dict[str, float]:
    if backend_name == "heap":
        return _raw_dict(w)
    store = (_Rocksdict if backend_name == "rocksdb" else _Lmdb)(os.path.join(work, "raw"))
    try:
        return _raw_bytes(store, w)
    finally:
        store.close()


def compare(backend_name: str, work: str, w: Workload, rounds: int) -> list[dict]:
    """One record per operation: statekit's ops/s vs the raw loop's, best of ``rounds`` each."""
    ours: dict[str, float] = {}
    peer: dict[str, float] = {}
    for _ in range(rounds):  # interleaved: load on the machine hits both sides alike
        for side, best in ((_statekit, ours), (_raw, peer)):
            for phase, seconds in side(backend_name, work, w).items():
                best[phase] = min(best.get(phase, seconds), seconds)
            for name in os.listdir(work):
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    raw = RAW_NAMES[backend_name]
    return [record(f"{backend_name} {label} vs raw {raw}", w.ops(phase) / ours[phase],
                   w.ops(phase) / peer[RAW_PHASE.get(phase, phase)],
                   "ops/s", group="operations", aim=0.5, backend=backend_name, operation=phase, keys=len(w.keys),
                   ops=w.ops(phase), rounds=rounds)
            for phase, label in PHASES.items()]


def run(backends: tuple[str, ...] = BACKENDS, n_keys: int = 50_000, n_ops: int = 200_000, rounds: int = 3,
        cpu_time: bool = False) -> list[dict]:
    global _clock
    _clock = time.thread_time if cpu_time else time.perf_counter
    workload = Workload.of(n_keys, n_ops)
    work = tempfile.mkdtemp(prefix="statekit-bench-ops-")
    try:
        return [r for name in backends for r in compare(name, work, workload, rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--ops", type=int, default=200_000, help="ValueState operations")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many rounds per side")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time each phase by this thread's CPU time instead of wall time (a busy machine)")
    parser.add_argument("--json", help="write the result records to this file")
    args = parser.parse_args()
    report(run(tuple(args.backends.split(",")), args.keys, args.ops, args.rounds, args.cpu_time), args.json)


if __name__ == "__main__":
    main()
