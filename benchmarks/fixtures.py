"""What the benchmarks share: backends built as the runtime builds them, incompressible values,
key groups of synthetic keys, peak memory and directory sizes."""
from __future__ import annotations

import argparse
import os
import resource
from array import array
from typing import Any, Callable, Sequence

from benchmarks.report import report

from statekit.registry import backend_class
from statekit.serializers import StringSerializer
from statekit.spi import KeyedBackendParams, KeyedStateBackend, SubtaskInfo, key_group_for_key
from statekit.spi.serializer import TypeSerializer, trusting
from statekit.spi.storage import CheckpointStreams

MAX_P = 128
BACKENDS = ("heap", "rocksdb", "lmdb")
_RANDOM = os.urandom(1 << 20)


def keyed_backend(name: str, local_dir: str, *, subtask: int = 0, parallelism: int = 1,
                  restore: Sequence[Any] = (), streams: CheckpointStreams | None = None,
                  key_serializer: TypeSerializer | None = None, max_parallelism: int = MAX_P,
                  **options: str) -> KeyedStateBackend:
    """A keyed backend of ``name`` (string keys unless ``key_serializer`` says otherwise) for one
    subtask, restored from ``restore``."""
    if name != "heap":
        options = {"local-dir": local_dir, **options}
    factory = backend_class(name)(**options)
    with trusting(factory.native_snapshots_run_code):  # as a job that writes that native format
        return factory.create_keyed_backend(KeyedBackendParams(
            SubtaskInfo("bench", "op", subtask, parallelism, max_parallelism), key_serializer or StringSerializer(),
            restore_handles=tuple(restore), restore_streams=streams, local_dir=local_dir))


def commit_writes(backend: KeyedStateBackend) -> None:
    """Commit LMDB's open write transaction: what the synchronous part of any snapshot, full or
    incremental, does first (a no-op elsewhere), so that it is charged to the writes, not to
    whichever snapshot comes first."""
    if hasattr(backend, "store"):  # lmdb
        backend.store.commit()


def flush(backend: KeyedStateBackend) -> None:
    """Make written state durable in the backend's files (RocksDB memtables, LMDB's open transaction)."""
    commit_writes(backend)
    if getattr(backend, "_db", None) is not None:  # rocksdb
        backend._db.flush()


def incompressible(i: int, size: int) -> bytes:
    """``size`` bytes that do not compress (a window of a random buffer) and differ per ``i``."""
    offset = (i * 7919) % (len(_RANDOM) - size)
    return _RANDOM[offset:offset + size - 8] + i.to_bytes(8, "big")


def key_name(i: int) -> str:
    return f"key-{i:09d}"


def key_groups(n_keys: int) -> array:
    """The key group of ``key_name(i)`` for every ``i < n_keys`` (2 bytes each)."""
    return array("H", (key_group_for_key(key_name(i), MAX_P) for i in range(n_keys)))


def directory_bytes(path: str) -> int:
    """Bytes of all regular files under ``path``."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def memory_status() -> dict[str, int]:
    """This process's ``/proc/self/status`` memory figures in bytes (VmHWM: peak resident set;
    RssAnon, RssFile: current anonymous and file-backed resident memory). ``ru_maxrss`` is only a
    fallback: Linux keeps it across exec, so a child would report its parent's peak."""
    try:
        with open("/proc/self/status") as status:
            return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in status)
                    if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile")}
    except OSError:
        return {"VmHWM": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def sized_command(description: str, run: Callable[[int, tuple[str, ...]], list[dict]], option: str = "keys",
                  default: int = 1_000_000) -> None:
    """The command line of a section of ``--<option>`` (keys, rows, ...) and ``--backends``: prints
    ``run(size, backends)``'s records (and writes them to ``--json``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(f"--{option}", type=int, default=default)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--json", help="write the result records to this file")
    args = parser.parse_args()
    report(run(getattr(args, option), tuple(args.backends.split(","))), args.json)
