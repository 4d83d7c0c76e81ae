"""RocksDB backend benchmarks, each side measured in the same run:

* ValueState get+update ops/s vs a raw rocksdict loop doing the same byte operations;
* full (canonical) vs incremental checkpoint: bytes written and seconds, at 1% churn;
* peak RSS of a process holding state several times larger than the block cache.

    python -m benchmarks.rocksdb_backend [--keys 5000000] [--ops 300000] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from rocksdict import Options, Rdict

from benchmarks.report import report
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.checkpoint.store import CheckpointStore
from statekit.serializers import BytesSerializer, Int64Serializer, StringSerializer
from statekit.spi import KeyedBackendParams, SnapshotOptions, SubtaskInfo, ValueStateDescriptor, key_group_for_key
from statekit.storage.filesystem import FileSystemCheckpointStorage

MAX_P = 128


def _backend(local_dir: str, **options: str):
    factory = RocksDBStateBackend(**{"local-dir": local_dir, **options})
    return factory.create_keyed_backend(KeyedBackendParams(SubtaskInfo("bench", "op", 0, 1, MAX_P),
                                                           StringSerializer(), local_dir=local_dir))


def per_operation(work: str, n_keys: int, n_ops: int) -> dict:
    keys = [f"user-{i}" for i in range(n_keys)]
    groups = [key_group_for_key(k, MAX_P) for k in keys]
    order = [i % n_keys for i in range(n_ops)]
    backend = _backend(os.path.join(work, "ops"))
    state = backend.get_state(ValueStateDescriptor("count", Int64Serializer()))
    set_key = backend.set_current_key
    started = time.perf_counter()
    for i in order:
        set_key(keys[i], groups[i])
        state.update((state.value() or 0) + 1)
    ours = n_ops / (time.perf_counter() - started)
    backend.dispose()

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    raw = Rdict(os.path.join(work, "raw"), options)
    pack, unpack = struct.Struct(">q").pack, struct.Struct(">q").unpack
    get, put = raw.get, raw.put
    started = time.perf_counter()
    for i in order:
        key = keys[i].encode()
        data = get(key)
        put(key, pack((unpack(data)[0] if data is not None else 0) + 1))
    peer = n_ops / (time.perf_counter() - started)
    raw.close()
    return {"name": "rocksdb ValueState get+update vs raw rocksdict", "ours": ours, "peer": peer,
            "unit": "ops/s", "ratio": ours / peer, "keys": n_keys, "ops": n_ops}


def checkpoints(work: str, n_keys: int) -> list[dict]:
    backend = _backend(os.path.join(work, "chk"), **{"write-buffer-size": "64m"})
    state = backend.get_state(ValueStateDescriptor("value", BytesSerializer()))
    started = time.perf_counter()
    for i in range(n_keys):
        key = f"key-{i:09d}"
        backend.set_current_key(key, key_group_for_key(key, MAX_P))
        state.update(_incompressible(i, 64))
    load_seconds = time.perf_counter() - started
    access = FileSystemCheckpointStorage(os.path.join(work, "storage")).create_access("bench")
    store = CheckpointStore(access, 2)

    def checkpoint(checkpoint_id: int, incremental: bool) -> tuple[int, float]:
        streams = access.streams(checkpoint_id, "op-0")
        started = time.perf_counter()
        handle = backend.snapshot(checkpoint_id, SnapshotOptions(incremental=incremental)).write(streams)
        seconds = time.perf_counter() - started
        previous = store.latest()
        known = set()
        if previous is not None:
            known = {getattr(h, "path", None) for s in previous.metadata.operators["op"].subtasks
                     for k in s.keyed for h in k.stream_handles()}
        written = sum(h.size for h in handle.stream_handles() if getattr(h, "path", None) not in known)
        store.add(CheckpointMetadata(checkpoint_id, "bench", {"op": OperatorState("op", 1, MAX_P,
                                                                                 (SubtaskState((handle,)),))}))
        backend.notify_checkpoint_complete(checkpoint_id)
        return written, seconds

    base_bytes, base_seconds = checkpoint(1, True)
    churn = range(0, n_keys, 100)
    for i in churn:
        key = f"key-{i:09d}"
        backend.set_current_key(key, key_group_for_key(key, MAX_P))
        state.update(os.urandom(64))
    incremental_bytes, incremental_seconds = checkpoint(2, True)
    full_bytes, full_seconds = checkpoint(3, False)
    backend.dispose()
    common = {"keys": n_keys, "churn": 0.01, "load_seconds": load_seconds,
              "first_incremental_bytes": base_bytes, "first_incremental_seconds": base_seconds}
    return [
        {"name": "rocksdb checkpoint bytes at 1% churn: incremental vs full", "ours": incremental_bytes,
         "peer": full_bytes, "unit": "bytes", "ratio": incremental_bytes / full_bytes, **common},
        {"name": "rocksdb checkpoint seconds at 1% churn: incremental vs full", "ours": incremental_seconds,
         "peer": full_seconds, "unit": "s", "ratio": incremental_seconds / full_seconds, **common},
    ]


_RANDOM = os.urandom(1 << 20)


def _incompressible(i: int, size: int) -> bytes:
    """``size`` bytes that do not compress (a window of a random buffer) and differ per ``i``."""
    offset = (i * 7919) % (len(_RANDOM) - size)
    return _RANDOM[offset:offset + size - 8] + i.to_bytes(8, "big")


def _peak_rss() -> int:
    """This process's peak resident set (VmHWM). ``ru_maxrss`` is not used: Linux keeps it across
    exec, so a child would report its parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def list_encoding(work: str, n_lists: int = 20_000, lengths: tuple[int, ...] = (4, 32)) -> list[dict]:
    """Why list state is one value per list: rocksdict has no merge operator, so either an add
    reads, appends and writes the whole list (one value), or it writes one entry per element plus
    a length counter (per element: a get and two puts; reading the list is a range scan)."""
    from statekit.backends.common.key_layout import decode_list, prefix_upper_bound, varint
    from statekit.backends.rocksdb.table import bounded_items

    results = []
    element = os.urandom(16)
    for length in lengths:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        one_value = Rdict(os.path.join(work, f"list-one-{length}"), options)
        started = time.perf_counter()
        for _ in range(length):
            for i in range(n_lists):
                key = b"k%08d" % i
                old = one_value.get(key)
                one_value.put(key, (old or b"") + varint(len(element)) + element)
        for i in range(n_lists):
            decode_list(one_value.get(b"k%08d" % i))
        one_value_seconds = time.perf_counter() - started
        one_value.close()

        per_element = Rdict(os.path.join(work, f"list-per-element-{length}"), options)
        started = time.perf_counter()
        for _ in range(length):
            for i in range(n_lists):
                prefix = b"k%08d" % i
                count = per_element.get(prefix + b"#")
                n = int.from_bytes(count, "big") if count else 0
                per_element.put(prefix + b"@" + n.to_bytes(4, "big"), element)
                per_element.put(prefix + b"#", (n + 1).to_bytes(4, "big"))
        for i in range(n_lists):
            lower = b"k%08d@" % i
            [v for _, v in bounded_items(per_element, lower, prefix_upper_bound(lower))]
        per_element_seconds = time.perf_counter() - started
        per_element.close()
        ops = n_lists * length
        results.append({"name": f"list state add x{length} + get: one value vs one entry per element",
                        "ours": ops / one_value_seconds, "peer": ops / per_element_seconds, "unit": "adds/s",
                        "ratio": per_element_seconds / one_value_seconds, "lists": n_lists, "length": length})
    return results


def rescale_strategies(work: str, n_keys: int = 1_000_000) -> list[dict]:
    """Restoring subtask 1 of 3 from two old instances (subtasks 0 and 1 of 2): (a) clip the base
    instance with range deletes and merge the other by iterating and writing (what the backend
    does), against (b) a fresh instance filled by iterating both, and (c) clipping and ingesting
    the other's range as an SST file."""
    from rocksdict import SstFileWriter

    from statekit.backends.common.key_layout import key_group_bounds
    from statekit.backends.rocksdb.table import ColumnFamilyTable, bounded_items
    from statekit.spi import KeyGroupRange

    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    old = [KeyGroupRange.of_subtask(MAX_P, 2, i) for i in range(2)]
    target = KeyGroupRange.of_subtask(MAX_P, 3, 1)
    sources = []
    for index, key_groups in enumerate(old):
        path = os.path.join(work, f"old-{index}")
        db = Rdict(path, opts)
        for i in range(n_keys // 2):
            kg = key_groups.start + i % len(key_groups)
            db.put(kg.to_bytes(2, "big") + b"k%09d" % i, _incompressible(i, 64))
        db.close()
        sources.append(path)
    base_index = max(range(2), key=lambda i: len(old[i].intersection(target)))
    other = sources[1 - base_index]
    lower, upper = key_group_bounds(target)
    o_lower, o_upper = key_group_bounds(old[1 - base_index].intersection(target))

    def copy_base(name: str) -> str:
        path = os.path.join(work, name)
        shutil.copytree(sources[base_index], path)
        return path

    def clip(db: Rdict) -> None:
        db.delete_range(b"", lower)
        db.delete_range(upper, b"\xff" * 4)

    def clip_and_merge() -> None:
        db = Rdict(copy_base("a"), opts)
        clip(db)
        source = Rdict(other, opts)
        ColumnFamilyTable(db, db, db.get_column_family_handle("default")).put_many(
            bounded_items(source, o_lower, o_upper))
        source.close()
        db.close()

    def fresh() -> None:
        db = Rdict(os.path.join(work, "b"), opts)
        for path in sources:
            source = Rdict(path, opts)
            ColumnFamilyTable(db, db, db.get_column_family_handle("default")).put_many(
                bounded_items(source, lower, upper))
            source.close()
        db.close()

    def clip_and_ingest() -> None:
        db = Rdict(copy_base("c"), opts)
        clip(db)
        source = Rdict(other, opts)
        sst = os.path.join(work, "ingest.sst")
        writer = SstFileWriter(options=opts)
        writer.open(sst)
        for key, value in bounded_items(source, o_lower, o_upper):
            writer[key] = value
        writer.finish()
        source.close()
        db.ingest_external_file([sst])
        db.close()

    timings = {}
    for name, strategy in (("clip+merge", clip_and_merge), ("fresh", fresh), ("clip+ingest", clip_and_ingest)):
        started = time.perf_counter()
        strategy()
        timings[name] = time.perf_counter() - started
    return [{"name": f"rocksdb rescale 2->3 (subtask 1): clip+merge vs {peer}", "ours": timings["clip+merge"],
             "peer": timings[peer], "unit": "s", "ratio": timings["clip+merge"] / timings[peer], "keys": n_keys}
            for peer in ("fresh", "clip+ingest")]


def _hold_state(work: str, n_keys: int, cache: str) -> None:
    """Child process: write n_keys of 200 random (incompressible) bytes, read a seventh of them
    back, print peak RSS and the state's size on disk."""
    backend = _backend(os.path.join(work, "rss"), **{"block-cache-size": cache, "write-buffer-size": "16m"})
    state = backend.get_state(ValueStateDescriptor("value", BytesSerializer()))
    for i in range(n_keys):
        key = f"key-{i:09d}"
        backend.set_current_key(key, key_group_for_key(key, MAX_P))
        state.update(_incompressible(i, 200))
    backend._db.flush()
    for i in range(0, n_keys, 7):
        key = f"key-{i:09d}"
        backend.set_current_key(key, key_group_for_key(key, MAX_P))
        state.value()
    size = sum(os.path.getsize(os.path.join(backend.db_dir, f)) for f in os.listdir(backend.db_dir))
    print(json.dumps({"peak_rss": _peak_rss(), "state_bytes": size}))
    backend.dispose()


def memory(work: str, n_keys: int, cache_mb: int = 32) -> dict:
    code = ("import sys, benchmarks.rocksdb_backend as b; "
            "b._hold_state(sys.argv[1], int(sys.argv[2]), sys.argv[3])")
    baseline = subprocess.run([sys.executable, "-c", code, work, "1000", f"{cache_mb}m"], capture_output=True,
                              text=True, check=True)
    loaded = subprocess.run([sys.executable, "-c", code, work, str(n_keys), f"{cache_mb}m"], capture_output=True,
                            text=True, check=True)
    small, big = json.loads(baseline.stdout), json.loads(loaded.stdout)
    growth = big["peak_rss"] - small["peak_rss"]
    return {"name": "rocksdb peak RSS growth vs state size on disk", "ours": growth, "peer": big["state_bytes"],
            "unit": "bytes", "ratio": growth / big["state_bytes"], "keys": n_keys, "block_cache_mb": cache_mb,
            "peak_rss": big["peak_rss"], "baseline_rss": small["peak_rss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5_000_000, help="keys in the checkpoint benchmark")
    parser.add_argument("--ops", type=int, default=300_000)
    parser.add_argument("--rss-keys", type=int, default=2_000_000)
    parser.add_argument("--json", help="write the result records to this file")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="statekit-bench-")
    try:
        results = [per_operation(work, 100_000, args.ops), *list_encoding(work), *rescale_strategies(work),
                   *checkpoints(work, args.keys), memory(work, args.rss_keys)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.json)


if __name__ == "__main__":
    main()
