"""State bytes per key group of a checkpoint: what ``statekit state skew`` prints and plots.

Canonical snapshots (and the changelog chains of incremental heap and LMDB checkpoints) index
their bytes by key group, so the figures are the bytes stored per key group, exact (a changelog
chain's include its deltas, which overstate live state after many updates). Native snapshots
and RocksDB's incremental SST files are not split by key group: their size is spread evenly over
the key groups of the subtask that wrote them, and the document says it is an estimate.
"""
from __future__ import annotations

from typing import Any, Iterator

from statekit.backends.common.changelog import ChangelogStateHandle
from statekit.checkpoint.metadata import read_metadata
from statekit.inspection import InspectionError, resolve_checkpoint
from statekit.spi.handles import KeyedStateHandle, KeyGroupsStateHandle
from statekit.spi.key_groups import operator_index_for_key_group


def key_group_bytes(url: str, operator_id: str | None = None, top: int = 5,
                    storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The document ``state skew --json`` prints: bytes per key group of an operator's keyed
    state in the checkpoint or savepoint at ``url``, and the ``top`` hottest key groups."""
    if top < 1:
        raise InspectionError(f"--top must be at least 1, got {top}")
    resolved = resolve_checkpoint(url, storage_options, "path")
    metadata = read_metadata(resolved.metadata, resolved.pointer)
    if operator_id is None and len(metadata.operators) != 1:
        raise InspectionError(f"the snapshot holds the operators {sorted(metadata.operators)}: name one with "
                              f"--operator")
    operator = metadata.operator(operator_id or next(iter(metadata.operators)))
    sizes = [0.0] * operator.max_parallelism
    exact = [True] * operator.max_parallelism
    for subtask in operator.subtasks:
        for handle in subtask.keyed:
            for key_group, size, is_exact in _split(handle):
                sizes[key_group] += size
                exact[key_group] = exact[key_group] and is_exact
    total = sum(sizes)
    mean = total / len(sizes) if sizes else 0.0
    groups = [{"key_group": kg, "subtask": operator_index_for_key_group(operator.max_parallelism,
                                                                         operator.parallelism, kg),
               "bytes": round(size), "exact": exact[kg]} for kg, size in enumerate(sizes)]
    hottest = sorted(groups, key=lambda g: (-g["bytes"], g["key_group"]))[:top]
    return {"path": resolved.pointer.external_pointer, "job_id": metadata.job_id,
            "checkpoint_id": metadata.checkpoint_id, "operator_id": operator.operator_id,
            "parallelism": operator.parallelism, "max_parallelism": operator.max_parallelism,
            "total_bytes": round(total), "exact": all(exact), "key_groups": groups,
            "hottest": [{**g, "share": g["bytes"] / total if total else 0.0,
                         "times_mean": g["bytes"] / mean if mean else 0.0} for g in hottest if g["bytes"] > 0]}


def _split(handle: KeyedStateHandle) -> Iterator[tuple[int, float, bool]]:
    """(key group, bytes, exact) of one keyed handle."""
    if isinstance(handle, ChangelogStateHandle):
        for part in (handle.base, *handle.deltas):
            yield from _split(part)
    elif isinstance(handle, KeyGroupsStateHandle):
        for key_group, byte_range in handle.key_groups.items():
            yield key_group, float(byte_range.length), True
    else:  # one file set for the whole range: spread evenly
        key_groups = list(handle.key_group_range)
        for key_group in key_groups:
            yield key_group, handle.state_size / len(key_groups), False
