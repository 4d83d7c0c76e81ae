"""RocksDB backend benchmarks, each side measured in the same run:

* state operations vs a raw rocksdict loop doing the same byte operations (``operations``);
* list state encodings: one value per list vs one entry per element;
* rescale strategies: clip + merge vs a fresh instance vs clip + SST ingestion;
* incremental vs full checkpoints, restore and rescale (``checkpointing``);
* peak memory of a process holding state several times larger than the block cache (``memory``).

    python -m benchmarks.rocksdb_backend [--keys 5000000] [--ops 300000] [--rss-keys 2000000] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from rocksdict import Options, Rdict

from benchmarks import checkpointing, memory, operations
from benchmarks.fixtures import MAX_P, incompressible
from benchmarks.report import record, report


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
        results.append(record(f"rocksdb list state add x{length} + get: one value vs one entry per element",
                              ops / one_value_seconds, ops / per_element_seconds, "adds/s", group="operations",
                              lists=n_lists, length=length))
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
            db.put(kg.to_bytes(2, "big") + b"k%09d" % i, incompressible(i, 64))
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
    return [record(f"rocksdb rescale 2->3 (subtask 1): clip+merge vs {peer}", timings["clip+merge"], timings[peer],
                   "s", group="checkpoint", keys=n_keys)
            for peer in ("fresh", "clip+ingest")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5_000_000, help="keys in the checkpoint benchmark")
    parser.add_argument("--ops", type=int, default=300_000)
    parser.add_argument("--rss-keys", type=int, default=2_000_000)
    parser.add_argument("--json", help="write the result records to this file")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="statekit-bench-")
    try:
        results = [*operations.run(("rocksdb",), 100_000, args.ops), *list_encoding(work), *rescale_strategies(work),
                   *checkpointing.run(("rocksdb",), args.keys), *memory.run(("rocksdb",), args.rss_keys)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.json)


if __name__ == "__main__":
    main()
