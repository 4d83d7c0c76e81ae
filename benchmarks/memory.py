"""Peak memory of a worker process holding out-of-core state (rocksdb, lmdb) several times larger
than the backend's in-process memory budget, next to the state's size on disk.

A child process writes ``keys`` value cells of 200 incompressible bytes, reads a seventh of them
back, and reports its peak resident set (``VmHWM``) and the peak of its anonymous memory
(sampled every 10 ms), which leaves out the file pages LMDB maps (the OS may drop those at any
time). The same child with 1,000 keys is the baseline; each record is the growth over it vs the
state's bytes on disk. Budgets: RocksDB's block cache plus its write buffers; LMDB's write
batch (the writes kept for replay), as LMDB has no cache of its own.

    python -m benchmarks.memory [--backends rocksdb,lmdb] [--keys 1000000] [--cache-mb 32] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from benchmarks.fixtures import directory_bytes, flush, incompressible, key_groups, key_name, keyed_backend, memory_status
from benchmarks.report import record, report
from statekit.serializers import BytesSerializer
from statekit.spi import ValueStateDescriptor

OUT_OF_CORE = ("rocksdb", "lmdb")
VALUE_BYTES = 200
BASELINE_KEYS = 1_000
WRITE_BUFFERS = 2


def budget_options(backend_name: str, cache_mb: int) -> tuple[dict[str, str], int]:
    """The backend options that bound its memory to about ``cache_mb``, and that bound in bytes."""
    if backend_name == "rocksdb":
        buffer_mb = max(1, cache_mb // 4)
        return ({"block-cache-size": f"{cache_mb}m", "write-buffer-size": f"{buffer_mb}m",
                 "max-write-buffer-number": str(WRITE_BUFFERS)}, (cache_mb + WRITE_BUFFERS * buffer_mb) << 20)
    return {"write-batch-size": f"{cache_mb}m"}, cache_mb << 20


class _AnonymousPeak(threading.Thread):
    """Samples this process's anonymous resident memory every 10 ms and keeps the peak."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.01):
            self.peak = max(self.peak, memory_status().get("RssAnon", 0))


def hold_state(backend_name: str, work: str, n_keys: int, cache_mb: int) -> dict[str, int]:
    """In the child: build the state, read some back, return its memory figures and size on disk."""
    sampler = _AnonymousPeak()
    sampler.start()
    options, _ = budget_options(backend_name, cache_mb)
    backend = keyed_backend(backend_name, work, **options)
    state = backend.get_state(ValueStateDescriptor("value", BytesSerializer()))
    groups = key_groups(n_keys)
    for i in range(n_keys):
        backend.set_current_key(key_name(i), groups[i])
        state.update(incompressible(i, VALUE_BYTES))
    flush(backend)
    for i in range(0, n_keys, 7):
        backend.set_current_key(key_name(i), groups[i])
        state.value()
    sampler.stopped.set()
    sampler.join()
    figures = {"peak_rss": memory_status()["VmHWM"], "peak_anonymous": sampler.peak,
               "state_bytes": directory_bytes(work)}
    backend.dispose()
    return figures


def _child(backend_name: str, work: str, n_keys: int, cache_mb: int) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--child", backend_name, work, str(n_keys),
                           str(cache_mb)], capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return json.loads(done.stdout.splitlines()[-1])


def compare(backend_name: str, n_keys: int, cache_mb: int) -> list[dict]:
    work = tempfile.mkdtemp(prefix="statekit-bench-memory-")
    try:
        small = _child(backend_name, work, BASELINE_KEYS, cache_mb)
        big = _child(backend_name, work, n_keys, cache_mb)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _, budget = budget_options(backend_name, cache_mb)
    details = {"backend": backend_name, "keys": n_keys, "value_bytes": VALUE_BYTES, "memory_budget_bytes": budget,
               "state_to_budget": big["state_bytes"] / budget, "peak_rss": big["peak_rss"],
               "baseline_peak_rss": small["peak_rss"]}
    return [record(f"{backend_name} worker peak {label} growth vs state size on disk", big[figure] - small[figure],
                   big["state_bytes"], "bytes", group="memory", **details)
            for label, figure in (("RSS", "peak_rss"), ("anonymous memory", "peak_anonymous"))]


def run(backends: tuple[str, ...] = OUT_OF_CORE, n_keys: int = 1_000_000, cache_mb: int = 32) -> list[dict]:
    return [r for name in backends for r in compare(name, n_keys, cache_mb)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(OUT_OF_CORE))
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--cache-mb", type=int, default=32)
    parser.add_argument("--json", help="write the result records to this file")
    parser.add_argument("--child", nargs=4, metavar=("BACKEND", "DIR", "KEYS", "CACHE_MB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, work, keys, cache_mb = args.child
        print(json.dumps(hold_state(name, work, int(keys), int(cache_mb))))
        return
    report(run(tuple(args.backends.split(",")), args.keys, args.cache_mb), args.json)


if __name__ == "__main__":
    main()
