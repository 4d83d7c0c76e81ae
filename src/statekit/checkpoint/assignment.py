"""Which handles each new subtask restores from, at the same or a different parallelism.

Keyed state follows key groups: a new subtask gets every old handle whose key-group range
intersects its own (and reads only the intersecting key groups). Operator state handles go to
every subtask, indexed by old subtask; the operator backend applies the redistribution rule of
each state's mode. The number of key groups is fixed for the life of a job.
"""
from __future__ import annotations

from dataclasses import dataclass

from statekit.checkpoint.metadata import OperatorState
from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import KeyedStateHandle, OperatorStateHandle
from statekit.spi.key_groups import KeyGroupRange


@dataclass(frozen=True)
class SubtaskRestore:
    keyed: tuple[KeyedStateHandle, ...]
    operator: tuple[OperatorStateHandle | None, ...]


def check_max_parallelism(state: OperatorState, max_parallelism: int) -> None:
    if state.max_parallelism != max_parallelism:
        raise ConfigurationError(
            f"operator {state.operator_id!r} was checkpointed with max parallelism "
            f"{state.max_parallelism}, but the job now uses {max_parallelism}. The number of key "
            f"groups is fixed for the life of a job: set spark.statekit.max-parallelism="
            f"{state.max_parallelism} (any parallelism up to it works)")


def assign(state: OperatorState, subtask_index: int, parallelism: int) -> SubtaskRestore:
    """The handles subtask ``subtask_index`` of ``parallelism`` restores from."""
    target = KeyGroupRange.of_subtask(state.max_parallelism, parallelism, subtask_index)
    keyed = tuple(h for subtask in state.subtasks for h in subtask.keyed
                  if h.key_group_range.intersects(target))
    return SubtaskRestore(keyed, tuple(s.operator for s in state.subtasks))
