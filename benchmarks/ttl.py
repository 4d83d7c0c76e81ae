"""What state TTL costs and saves, per backend, in the same run:

* ValueState get+update on the same keys with a ``StateTtlConfig`` and without (the TTL overhead:
  each entry carries an 8-byte write time, and every read checks it);
* the bytes of a full snapshot after 20 epochs that each write new keys, with a TTL of 10 epochs
  and without (the state TTL keeps bounded), the sweep running after each epoch as the runtime
  runs it.

    python -m benchmarks.ttl [--backends heap,rocksdb,lmdb] [--ops N] [--epoch-keys N] [--json FILE]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from benchmarks.fixtures import BACKENDS, MAX_P, keyed_backend
from benchmarks.report import record, report
from statekit.serializers import Int64Serializer
from statekit.spi import KeyedStateBackend, StateTtlConfig, ValueStateDescriptor, key_group_for_key
from statekit.storage.inline import InlineStreams

EPOCHS = 20
EPOCH_MS = 60_000
TTL_EPOCHS = 10
T0 = 1_700_000_000_000
ROUNDS = 3
SWEEP_SECONDS = 5.0


def _descriptor(ttl: bool) -> ValueStateDescriptor:
    config = StateTtlConfig(TTL_EPOCHS * EPOCH_MS / 1000) if ttl else None
    return ValueStateDescriptor("value", Int64Serializer(), ttl=config)


def _get_update(backend: KeyedStateBackend, ttl: bool, keys: list[tuple[str, int]], n_ops: int) -> float:
    """ops/s of get+update, keys visited round-robin."""
    state = backend.get_state(_descriptor(ttl))
    backend.set_processing_time(T0)
    set_key = backend.set_current_key
    n = len(keys)
    started = time.perf_counter()
    for i in range(n_ops):
        key, group = keys[i % n]
        set_key(key, group)
        state.update((state.value() or 0) + 1)
    return n_ops / (time.perf_counter() - started)


def _bytes_after_epochs(name: str, directory: str, ttl: bool, epoch_keys: int) -> int:
    backend = keyed_backend(name, directory)
    try:
        state = backend.get_state(_descriptor(ttl))
        for epoch in range(1, EPOCHS + 1):
            backend.set_processing_time(T0 + epoch * EPOCH_MS)
            for i in range(epoch_keys):
                key = f"e{epoch:03d}-{i:07d}"
                backend.set_current_key(key, key_group_for_key(key, MAX_P))
                state.update(i)
            backend.sweep_expired(SWEEP_SECONDS)
        handle = backend.snapshot(EPOCHS).write(InlineStreams())
        return handle.state_size if handle is not None else 0
    finally:
        backend.dispose()


def run(backends: tuple[str, ...] = BACKENDS, n_ops: int = 200_000, epoch_keys: int = 5_000) -> list[dict]:
    keys = [(f"user-{i}", key_group_for_key(f"user-{i}", MAX_P)) for i in range(max(1, n_ops // 10))]
    results = []
    for name in backends:
        best = {True: 0.0, False: 0.0}
        for _ in range(ROUNDS):
            for ttl in (False, True):  # interleaved: both sides see the same machine
                directory = tempfile.mkdtemp(prefix=f"statekit-bench-ttl-{name}-")
                backend = keyed_backend(name, directory)
                try:
                    best[ttl] = max(best[ttl], _get_update(backend, ttl, keys, n_ops))
                finally:
                    backend.dispose()
                    shutil.rmtree(directory, ignore_errors=True)
        results.append(record(f"{name}: ValueState get+update with TTL vs without", best[True], best[False], "ops/s",
                              group="ttl", ops=n_ops, keys=len(keys)))
        sizes = {}
        for ttl in (True, False):
            directory = tempfile.mkdtemp(prefix=f"statekit-bench-ttl-{name}-")
            try:
                sizes[ttl] = _bytes_after_epochs(name, directory, ttl, epoch_keys)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        results.append(record(f"{name}: snapshot bytes after {EPOCHS} epochs, TTL {TTL_EPOCHS} epochs vs none",
                              sizes[True], sizes[False], "bytes", group="ttl", epochs=EPOCHS,
                              keys_per_epoch=epoch_keys))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--epoch-keys", type=int, default=5_000)
    parser.add_argument("--json")
    args = parser.parse_args()
    report(run(tuple(args.backends.split(",")), args.ops, args.epoch_keys), args.json)


if __name__ == "__main__":
    main()
