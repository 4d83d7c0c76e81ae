"""Checkpoint costs per backend, each side measured in the same run on the same state:

* incremental vs full checkpoint, bytes written and seconds, after 1% and after 10% of the keys
  changed (RocksDB: shared SST files; heap and LMDB: changelog deltas on a base);
* full checkpoint throughput vs the disk's sequential write bandwidth (a file of the same size
  written and fsynced, as checkpoint files are), the best of three interleaved rounds of each;
  for a backend with native snapshots (heap, RocksDB, LMDB) also in its native format
  (``spark.statekit.checkpoint.format=native``: RocksDB's SST files hard-linked into the
  checkpoint, as the storage is on the same file system, so the fraction may exceed 1; LMDB's
  environment copied by LMDB; the heap's key-group maps pickled), its seconds and bytes vs the
  canonical one's of the same state, and the restore from it vs from the canonical one;
* full checkpoints with each snapshot compression (lz4, zstd) vs none: bytes and seconds;
* restore at the same parallelism from the incremental checkpoint vs from the full one;
* rescale 4 -> 8 vs plain restore 4 -> 4, from the same incremental checkpoint (restores: best
  of two rounds), summed over the subtasks (the work) and of the slowest subtask (the wait when
  subtasks restore side by side, as on a cluster); and vs a plain restore 8 -> 8 of the same
  state checkpointed at parallelism 8, as many instances opened on both sides.

State: ``keys`` value cells of 64 incompressible bytes, in 4 subtasks of 128 key groups on the
``filesystem`` storage (local disk). Seconds are summed over the subtasks (run one after another)
unless a record says otherwise.

    python -m benchmarks.checkpointing [--backends heap,rocksdb,lmdb] [--keys 500000] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from array import array
from typing import Any

from benchmarks.fixtures import BACKENDS, MAX_P, commit_writes, incompressible, key_groups, key_name, keyed_backend
from benchmarks.report import record, report
from statekit.backends.common.canonical import COMPRESSIONS, DEFAULT_COMPRESSION
from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import OperatorState, SubtaskState
from statekit.registry import backend_class
from statekit.serializers import BytesSerializer
from statekit.spi import (
    KeyedStateBackend, SnapshotFormat, SnapshotOptions, StreamStateHandle, ValueStateDescriptor, operator_index_for_key_group,
)
from statekit.storage.filesystem import FileSystemCheckpointStorage

PARALLELISM = 4
RESCALED = 8
CHURNS = (0.01, 0.1)
RESTORE_ROUNDS = 2
THROUGHPUT_ROUNDS = 3
#: full checkpoint throughput / disk bandwidth to reach
THROUGHPUT_AIM = 0.5
WARM_UP_KEYS = 1_000
VALUE_BYTES = 64
STATE = ValueStateDescriptor("value", BytesSerializer())


def disk_write_bandwidth(directory: str, size: int) -> float:
    """Bytes/s of writing ``size`` bytes sequentially to a new file in ``directory`` and fsyncing it."""
    path = os.path.join(directory, "bandwidth-probe")
    chunk = incompressible(0, 4 << 20)
    started = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(max(1, size // len(chunk))):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - started
    os.remove(path)
    return max(1, size // len(chunk)) * len(chunk) / seconds


def _identity(stream: StreamStateHandle) -> tuple[str, int]:
    return getattr(stream, "path", None) or stream.checksum, stream.size


class _Job:
    """``PARALLELISM`` keyed backends of one backend kind and their checkpoints on local disk."""

    def __init__(self, backend_name: str, work: str, groups: array) -> None:
        self.name, self.work, self.groups = backend_name, work, groups
        self.access = FileSystemCheckpointStorage(os.path.join(work, "storage")).create_access("bench")
        self.backends = [keyed_backend(backend_name, os.path.join(work, "local"), subtask=i, parallelism=PARALLELISM)
                         for i in range(PARALLELISM)]
        self.states = [b.get_state(STATE) for b in self.backends]
        self.subtask_of = [operator_index_for_key_group(MAX_P, PARALLELISM, g) for g in range(MAX_P)]
        #: the streams of the incremental checkpoints taken so far, which later ones may reference
        self.written: dict[tuple[str, int], int] = {}

    def write(self, indices: range, version: int) -> None:
        for i in indices:
            subtask = self.subtask_of[self.groups[i]]
            self.backends[subtask].set_current_key(key_name(i), self.groups[i])
            self.states[subtask].update(incompressible(i + version, VALUE_BYTES))
        for backend in self.backends:
            commit_writes(backend)

    def checkpoint(self, checkpoint_id: int, incremental: bool, snapshot_format: SnapshotFormat = SnapshotFormat.CANONICAL
                   ) -> tuple[int, float, OperatorState]:
        """Bytes of the streams this checkpoint wrote (files and inline; not those it references
        from earlier checkpoints) and seconds (sync and async parts, all subtasks)."""
        handles, seconds = [], 0.0
        options = SnapshotOptions(incremental=incremental, format=snapshot_format)
        for i, backend in enumerate(self.backends):
            started = time.perf_counter()
            pending = backend.snapshot(checkpoint_id, options)
            handles.append(pending.write(self.access.streams(checkpoint_id, f"op-{i}")))
            seconds += time.perf_counter() - started
        streams = {_identity(s): s.size for h in handles for s in h.stream_handles()}
        written = sum(size for identity, size in streams.items() if identity not in self.written)
        if incremental:
            self.written.update(streams)
        for backend in self.backends:  # full checkpoints are measured, never completed: the chain goes on
            if incremental:
                backend.notify_checkpoint_complete(checkpoint_id)
            else:
                backend.notify_checkpoint_aborted(checkpoint_id)
        return written, seconds, OperatorState("op", PARALLELISM, MAX_P, tuple(SubtaskState((h,)) for h in handles))

    def restore_seconds(self, operator: OperatorState, parallelism: int) -> list[float]:
        """Seconds to restore each subtask of ``parallelism`` from ``operator``'s handles."""
        seconds = []
        for index in range(parallelism):
            handles = assign(operator, index, parallelism).keyed
            started = time.perf_counter()
            backend: KeyedStateBackend = keyed_backend(
                self.name, os.path.join(self.work, "restored"), subtask=index, parallelism=parallelism,
                restore=handles, streams=self.access.restore_streams())
            seconds.append(time.perf_counter() - started)
            backend.dispose()
        return seconds

    def rescaled_checkpoint(self, operator: OperatorState, parallelism: int, checkpoint_id: int) -> OperatorState:
        """``operator`` restored at ``parallelism`` and checkpointed again (incremental): the same
        state as a job running at ``parallelism`` would checkpoint it."""
        handles = []
        for index in range(parallelism):
            backend: KeyedStateBackend = keyed_backend(
                self.name, os.path.join(self.work, "rescaled"), subtask=index, parallelism=parallelism,
                restore=assign(operator, index, parallelism).keyed, streams=self.access.restore_streams())
            pending = backend.snapshot(checkpoint_id, SnapshotOptions(incremental=True))
            handles.append(pending.write(self.access.streams(checkpoint_id, f"op-{index}-of-{parallelism}")))
            backend.dispose()
        return OperatorState("op", parallelism, MAX_P, tuple(SubtaskState((h,)) for h in handles))

    def dispose(self) -> None:
        for backend in self.backends:
            backend.dispose()


def compare(backend_name: str, work: str, groups: array) -> list[dict]:
    n_keys = len(groups)
    job = _Job(backend_name, work, groups)
    started = time.perf_counter()
    job.write(range(n_keys), 0)
    common: dict[str, Any] = {"backend": backend_name, "keys": n_keys, "value_bytes": VALUE_BYTES,
                              "parallelism": PARALLELISM, "load_seconds": time.perf_counter() - started}
    base_bytes, base_seconds, _ = job.checkpoint(1, incremental=True)
    common.update(base_bytes=base_bytes, base_seconds=base_seconds)
    results, checkpoint_id = [], 1
    for churn in CHURNS:
        step = round(1 / churn)
        job.write(range(checkpoint_id % step, n_keys, step), checkpoint_id)
        incremental_bytes, incremental_seconds, incremental = job.checkpoint(checkpoint_id + 1, incremental=True)
        full_bytes, full_seconds, full = job.checkpoint(checkpoint_id + 2, incremental=False)
        checkpoint_id += 2
        details = {**common, "churn": churn}
        label = f"{churn:.0%} churn"
        results += [
            record(f"{backend_name} checkpoint bytes at {label}: incremental vs full", incremental_bytes, full_bytes,
                   "bytes", group="checkpoint", aim=2 * churn, **details),
            record(f"{backend_name} checkpoint seconds at {label}: incremental vs full", incremental_seconds,
                   full_seconds, "s", group="checkpoint", aim=2 * churn, **details)]
    native = _native(job)
    results += _throughput(job, checkpoint_id + 1, work, common)
    if native:
        _, _, native_full = job.checkpoint(checkpoint_id + 100, incremental=False,
                                           snapshot_format=SnapshotFormat.NATIVE)
    job.dispose()
    at_rescaled = job.rescaled_checkpoint(incremental, RESCALED, checkpoint_id + 2)
    restores = {"incremental": (incremental, PARALLELISM), "full": (full, PARALLELISM),
                "rescaled": (incremental, RESCALED), "at rescaled": (at_rescaled, RESCALED)}
    if native:
        restores["native full"] = (native_full, PARALLELISM)
    best = {name: float("inf") for name in restores}
    slowest = dict(best)
    for _ in range(RESTORE_ROUNDS):  # interleaved, best of each: load on the machine hits every side alike
        for name, (operator, parallelism) in restores.items():
            seconds = job.restore_seconds(operator, parallelism)
            best[name], slowest[name] = min(best[name], sum(seconds)), min(slowest[name], max(seconds))
    results += [
        record(f"{backend_name} restore {PARALLELISM}->{PARALLELISM} seconds: incremental vs full checkpoint",
               best["incremental"], best["full"], "s", group="checkpoint", **common),
        *([record(f"{backend_name} restore {PARALLELISM}->{PARALLELISM} seconds: native vs canonical full checkpoint",
                  best["native full"], best["full"], "s", group="checkpoint", **common)] if native else []),
        record(f"{backend_name} rescale {PARALLELISM}->{RESCALED} vs restore {PARALLELISM}->{PARALLELISM} seconds",
               best["rescaled"], best["incremental"], "s", group="checkpoint",
               aim=1.5 if backend_name == "rocksdb" else None, **common),
        record(f"{backend_name} rescale {PARALLELISM}->{RESCALED} vs restore {PARALLELISM}->{PARALLELISM}, "
               "slowest subtask seconds", slowest["rescaled"], slowest["incremental"], "s", group="checkpoint",
               **common),
        # as many instances open on both sides: what rescaling costs beyond opening them
        record(f"{backend_name} rescale {PARALLELISM}->{RESCALED} vs restore {RESCALED}->{RESCALED} seconds",
               best["rescaled"], best["at rescaled"], "s", group="checkpoint", **common)]
    return results


def _throughput(job: _Job, checkpoint_id: int, work: str, common: dict[str, Any]) -> list[dict]:
    """Full checkpoints vs the disk, best of interleaved rounds; then each compression vs none."""
    name = job.name
    formats = [SnapshotFormat.CANONICAL] + ([SnapshotFormat.NATIVE] if _native(job) else [])
    seconds, sizes, disk = dict.fromkeys(formats, float("inf")), dict.fromkeys(formats, 0), 0.0
    for _ in range(THROUGHPUT_ROUNDS):  # interleaved, best of each: load on the machine hits every side alike
        for snapshot_format in formats:
            sizes[snapshot_format], round_seconds, _ = job.checkpoint(checkpoint_id, False, snapshot_format)
            checkpoint_id += 1
            seconds[snapshot_format] = min(seconds[snapshot_format], round_seconds)
        disk = max(disk, disk_write_bandwidth(work, sizes[SnapshotFormat.CANONICAL]))
    results = [record(f"{name} {'' if f is SnapshotFormat.CANONICAL else 'native '}full checkpoint throughput vs disk "
                      f"write+fsync", sizes[f] / seconds[f], disk, "bytes/s", group="checkpoint", aim=THROUGHPUT_AIM,
                      **common, full_bytes=sizes[f], compression=DEFAULT_COMPRESSION, format=f.value)
               for f in formats]
    if SnapshotFormat.NATIVE in formats:  # the same state: what the bytes/s of files of other sizes leave out
        native, canonical = SnapshotFormat.NATIVE, SnapshotFormat.CANONICAL
        results += [
            record(f"{name} full checkpoint seconds: native vs canonical", seconds[native], seconds[canonical], "s",
                   group="checkpoint", **common),
            record(f"{name} full checkpoint bytes: native vs canonical", sizes[native], sizes[canonical], "bytes",
                   group="checkpoint", **common)]
    measured: dict[str, tuple[int, float]] = {}
    for _ in range(THROUGHPUT_ROUNDS):
        for compression in COMPRESSIONS:
            for backend in job.backends:
                backend.snapshot_compression = compression  # type: ignore[attr-defined]
            size, round_seconds, _ = job.checkpoint(checkpoint_id, incremental=False)
            checkpoint_id += 1
            measured[compression] = (size, min(round_seconds, measured.get(compression, (0, float("inf")))[1]))
    for backend in job.backends:
        backend.snapshot_compression = DEFAULT_COMPRESSION  # type: ignore[attr-defined]
    plain_bytes, plain_seconds = measured["none"]
    for compression in COMPRESSIONS:
        if compression != "none":
            size, round_seconds = measured[compression]
            details = {**common, "compression": compression}
            results += [
                record(f"{name} full checkpoint bytes: {compression} vs no compression", size, plain_bytes, "bytes",
                       group="checkpoint", **details),
                record(f"{name} full checkpoint seconds: {compression} vs no compression", round_seconds,
                       plain_seconds, "s", group="checkpoint", **details)]
    return results


def _native(job: _Job) -> bool:
    """Whether the backend writes full checkpoints in a native format of its own on request."""
    return backend_class(job.name).capabilities.native_snapshots


def _compare_in_temporary_directory(backend_name: str, groups: array) -> list[dict]:
    work = tempfile.mkdtemp(prefix="statekit-bench-checkpoints-")
    try:
        return compare(backend_name, work, groups)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(backends: tuple[str, ...] = BACKENDS, n_keys: int = 500_000) -> list[dict]:
    groups = key_groups(n_keys)
    # an untimed round on a few keys first: one-time costs (imports on the first canonical write,
    # such as pyarrow's of pandas, about 0.5 s) must not land in the first timed checkpoint
    _compare_in_temporary_directory(backends[0], groups[:WARM_UP_KEYS])
    return [r for name in backends for r in _compare_in_temporary_directory(name, groups)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--json", help="write the result records to this file")
    args = parser.parse_args()
    report(run(tuple(args.backends.split(",")), args.keys), args.json)


if __name__ == "__main__":
    main()
