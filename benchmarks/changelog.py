"""Changelog incremental checkpoints (heap, LMDB) against full ones, in the same run:
bytes written and seconds for a checkpoint after 1% of the keys changed.

    python -m benchmarks.changelog [--keys 5000000] [--backends heap,lmdb] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from benchmarks.report import report
from statekit.plugins import backend_class
from statekit.serializers import BytesSerializer, StringSerializer
from statekit.spi import KeyedBackendParams, SnapshotOptions, SubtaskInfo, ValueStateDescriptor, key_group_for_key
from statekit.storage.filesystem import FileSystemCheckpointStorage

MAX_P = 128
_RANDOM = os.urandom(1 << 20)


def _value(i: int) -> bytes:
    offset = (i * 7919) % (len(_RANDOM) - 64)
    return _RANDOM[offset:offset + 56] + i.to_bytes(8, "big")


def checkpoint_costs(backend_name: str, n_keys: int, work: str) -> list[dict]:
    local = os.path.join(work, backend_name)
    factory = backend_class(backend_name)(**({"local-dir": local} if backend_name != "heap" else {}))
    backend = factory.create_keyed_backend(KeyedBackendParams(SubtaskInfo("bench", "op", 0, 1, MAX_P),
                                                              StringSerializer(), local_dir=local))
    state = backend.get_state(ValueStateDescriptor("value", BytesSerializer()))
    keys = [f"key-{i:09d}" for i in range(n_keys)]
    groups = [key_group_for_key(k, MAX_P) for k in keys]
    for i in range(n_keys):
        backend.set_current_key(keys[i], groups[i])
        state.update(_value(i))
    access = FileSystemCheckpointStorage(os.path.join(work, f"storage-{backend_name}")).create_access("bench")

    def checkpoint(checkpoint_id: int, incremental: bool) -> tuple[int, float]:
        started = time.perf_counter()
        handle = backend.snapshot(checkpoint_id, SnapshotOptions(incremental=incremental)).write(
            access.streams(checkpoint_id, "op-0"))
        seconds = time.perf_counter() - started
        backend.notify_checkpoint_complete(checkpoint_id)
        newest = getattr(handle, "deltas", None)
        written = newest[-1].stream.size if newest else sum(h.size for h in handle.stream_handles())
        return written, seconds

    base_bytes, base_seconds = checkpoint(1, True)
    for i in range(0, n_keys, 100):
        backend.set_current_key(keys[i], groups[i])
        state.update(_value(i + 1))
    delta_bytes, delta_seconds = checkpoint(2, True)
    full_bytes, full_seconds = checkpoint(3, False)
    backend.dispose()
    common = {"backend": backend_name, "keys": n_keys, "churn": 0.01, "base_bytes": base_bytes,
              "base_seconds": base_seconds}
    return [
        {"name": f"{backend_name} checkpoint bytes at 1% churn: incremental vs full", "ours": delta_bytes,
         "peer": full_bytes, "unit": "bytes", "ratio": delta_bytes / full_bytes, **common},
        {"name": f"{backend_name} checkpoint seconds at 1% churn: incremental vs full", "ours": delta_seconds,
         "peer": full_seconds, "unit": "s", "ratio": delta_seconds / full_seconds, **common},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5_000_000)
    parser.add_argument("--backends", default="heap,lmdb")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="statekit-bench-")
    results: list[dict] = []
    try:
        for name in args.backends.split(","):
            results += checkpoint_costs(name, args.keys, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.json)


if __name__ == "__main__":
    main()
