"""One Spark partition per subtask, exactly.

``repartition(p, column)`` puts a row in partition ``pmod(murmur3(column, seed 42), p)``. Hashing
the subtask index itself would send two subtasks to one partition now and then (and leave
another partition empty): those two would run one after the other in one task, halving the
parallelism. So each subtask gets a *partition token*: the smallest non-negative int that
Spark's hash places in that subtask's partition. Rows are partitioned and grouped by token, and
the task maps the token back to its subtask index.
"""
from __future__ import annotations

from functools import lru_cache

_C1, _C2, _MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
SPARK_HASH_SEED = 42


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``hash()`` (Murmur3 x86 32-bit) of one non-null int column, as a signed int."""
    k1 = _rotl((value & _MASK) * _C1 & _MASK, 15) * _C2 & _MASK
    h1 = _rotl(seed & _MASK ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@lru_cache(maxsize=64)
def partition_tokens(parallelism: int) -> tuple[int, ...]:
    """``tokens[i]`` is an int that ``repartition(parallelism, ...)`` sends to partition ``i``."""
    tokens: dict[int, int] = {}
    candidate = 0
    while len(tokens) < parallelism:
        tokens.setdefault(spark_hash_int(candidate) % parallelism, candidate)  # Python's % is pmod
        candidate += 1
    return tuple(tokens[i] for i in range(parallelism))
