"""Changelog incremental checkpoints (heap, LMDB) against full ones, in the same run: bytes
written and seconds after 1% and 10% of the keys changed, with restore and rescale; the
``checkpointing`` benchmark for the changelog backends.

    python -m benchmarks.changelog [--keys 5000000] [--backends heap,lmdb] [--json FILE]
"""
from __future__ import annotations

import argparse

from benchmarks import checkpointing
from benchmarks.report import report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=5_000_000)
    parser.add_argument("--backends", default="heap,lmdb")
    parser.add_argument("--json")
    args = parser.parse_args()
    report(checkpointing.run(tuple(args.backends.split(",")), args.keys), args.json)


if __name__ == "__main__":
    main()
