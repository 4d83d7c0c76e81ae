"""LMDB backend benchmarks, each side measured in the same run:

* ValueState get+update ops/s vs a raw py-lmdb loop doing the same byte operations (same key
  layout, one named database, one write transaction for the whole loop as the backend keeps one
  open, a cursor's get/put: py-lmdb's fastest calls), with the default options and with
  ``writemap=true``;
* the backend's ``KVTable`` alone (get+put of the stored keys) against the same raw loop, which
  separates the cost of the LMDB layer from that of the shared state layer above it.

    python -m benchmarks.lmdb_backend [--keys 100000] [--ops 300000] [--rounds 3] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import lmdb

from benchmarks.fixtures import MAX_P, keyed_backend
from benchmarks.operations import increment_counters
from benchmarks.report import record, report
from statekit.serializers import Int64Serializer
from statekit.spi import ValueStateDescriptor, key_group_for_key


def _ours(work: str, keys: list[str], groups: list[int], order: list[int], options: dict) -> float:
    backend = keyed_backend("lmdb", os.path.join(work, "ours"), **options)
    try:
        state = backend.get_state(ValueStateDescriptor("count", Int64Serializer()))
        set_key = backend.set_current_key
        started = time.perf_counter()
        for i in order:
            set_key(keys[i], groups[i])
            state.update((state.value() or 0) + 1)
        backend.store.commit()
        return len(order) / (time.perf_counter() - started)
    finally:
        backend.dispose()


def _stored_keys(keys: list[str], groups: list[int]) -> list[bytes]:
    """The backend's stored keys: key group | len | key | len(namespace)=0 (keys under 128 bytes)."""
    return [g.to_bytes(2, "big") + bytes([len(k)]) + k.encode() + b"\x00" for k, g in zip(keys, groups)]


def _raw(work: str, keys: list[str], groups: list[int], order: list[int], options: dict) -> float:
    """The same bytes as the backend reads and writes (stored key, 8-byte count), with py-lmdb's
    fastest calls (a cursor's get/put) in one write transaction committed at the end."""
    path = os.path.join(work, "raw")
    env = lmdb.open(path, map_size=1 << 30, max_dbs=4, sync=False, metasync=False, readahead=False,
                    writemap=options.get("writemap") == "true")
    try:
        db = env.open_db(b"count")
        stored = _stored_keys(keys, groups)
        started = time.perf_counter()
        txn = env.begin(write=True)
        cursor = txn.cursor(db)
        increment_counters(cursor.get, cursor.put, stored, order)
        txn.commit()
        return len(order) / (time.perf_counter() - started)
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)


def _table_only(work: str, keys: list[str], groups: list[int], order: list[int], options: dict) -> float:
    """The backend's ``KVTable`` alone (no state layer): get + put of the same stored keys."""
    backend = keyed_backend("lmdb", os.path.join(work, "table"), **options)
    try:
        table = backend._table("count")
        stored = _stored_keys(keys, groups)
        started = time.perf_counter()
        increment_counters(table.get, table.put, stored, order)
        backend.store.commit()
        return len(order) / (time.perf_counter() - started)
    finally:
        backend.dispose()


def per_operation(work: str, n_keys: int, n_ops: int, rounds: int = 3, **options: str) -> list[dict]:
    keys = [f"user-{i}" for i in range(n_keys)]
    groups = [key_group_for_key(k, MAX_P) for k in keys]
    order = [i % n_keys for i in range(n_ops)]
    ours, table, peer = 0.0, 0.0, 0.0
    for _ in range(rounds):  # interleaved, best of each: load on the machine hits every side alike
        ours = max(ours, _ours(work, keys, groups, order, options))
        table = max(table, _table_only(work, keys, groups, order, options))
        peer = max(peer, _raw(work, keys, groups, order, options))
    label = ", ".join(f"{k}={v}" for k, v in options.items())
    suffix = f" ({label})" if label else ""
    common = {"group": "operations", "keys": n_keys, "ops": n_ops, "options": options}
    return [record(f"lmdb ValueState get+update vs raw py-lmdb{suffix}", ours, peer, "ops/s", **common),
            record(f"lmdb KVTable get+put vs raw py-lmdb{suffix}", table, peer, "ops/s", **common)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--ops", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3, help="best of this many runs per side")
    parser.add_argument("--json", help="write the result records to this file")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="statekit-bench-")
    try:
        results = [*per_operation(work, args.keys, args.ops, args.rounds),
                   *per_operation(work, args.keys, args.ops, args.rounds, writemap="true")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.json)


if __name__ == "__main__":
    main()
