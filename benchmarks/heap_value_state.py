"""Heap ValueState get+update ops/s next to a raw Python dict loop, in the same run.

Both sides do the same work per operation: make the key current (statekit: ``set_current_key``
with a precomputed key group, as the engines supply it; dict: nothing) and read-increment-write
one counter. Results are the best of several rounds; the ratio is what matters.

    python -m benchmarks.heap_value_state [--keys N] [--ops N] [--json FILE]
"""
from __future__ import annotations

import argparse
import time
from typing import Callable

from benchmarks.report import record, report
from statekit.backends.heap import HeapStateBackend
from statekit.serializers import PickleSerializer
from statekit.spi import KeyedBackendParams, SubtaskInfo, ValueStateDescriptor, key_group_for_key


def _best(fn: Callable[[], None], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def run(n_keys: int, n_ops: int, rounds: int = 5) -> dict:
    keys = [f"user-{i}" for i in range(n_keys)]
    key_groups = [key_group_for_key(k, 128) for k in keys]
    sequence = [(keys[i % n_keys], key_groups[i % n_keys]) for i in range(n_ops)]

    backend = HeapStateBackend().create_keyed_backend(KeyedBackendParams(
        SubtaskInfo("bench", "op", 0, 1, 128), PickleSerializer()))
    state = backend.get_state(ValueStateDescriptor("count", default=0))
    set_key = backend.set_current_key

    def statekit_loop() -> None:
        for key, key_group in sequence:
            set_key(key, key_group)
            state.update(state.value() + 1)

    raw: dict[str, int] = {}

    def dict_loop() -> None:
        get = raw.get
        for key, _ in sequence:
            raw[key] = get(key, 0) + 1

    ours = n_ops / _best(statekit_loop, rounds)
    peer = n_ops / _best(dict_loop, rounds)
    return record("heap ValueState get+update vs raw dict", ours, peer, "ops/s", group="operations", keys=n_keys,
                  ops=n_ops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--json", help="also write the result record to this file")
    args = parser.parse_args()
    report([run(args.keys, args.ops)], args.json)


if __name__ == "__main__":
    main()
