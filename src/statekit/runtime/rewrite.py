"""Offline state rewrites (Flink's State Processor API): a new savepoint from an existing one, its
states renamed, dropped, or turned by a function into other states.

A rewrite works subtask by subtask on the savepoint's canonical files:

- renamed and dropped states, and every state the rewrite does not name, pass through as rows:
  nothing is deserialized, so nothing runs and every kind of state (timers, namespaces, TTL)
  passes as it was; operator state is copied as it was;
- a ``KeyedStateTransform`` reads the states it names from the subtask's state, restored into a
  heap backend, key by key, and writes the states it declares into a fresh one, whose rows join
  the others. The states it reads are dropped unless it writes them again.

``rewrite_savepoint`` runs the subtasks in this process; ``statekit.spark.rewrite_savepoint``
runs each in a Spark task, for state larger than one process holds. ``statekit savepoint
rewrite`` renames and drops from the command line.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from statekit.backends.common.canonical import CanonicalSnapshotWriter, read_key_groups, state_runs
from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata, OperatorState, SubtaskState
from statekit.progress import progress
from statekit.reading.snapshot_reader import recorded_key_columns
from statekit.runtime.function import KeyedContext
from statekit.runtime.savepoints import SAVEPOINT, RestoreOnly
from statekit.runtime.task import KeyedTask, TaskRestore
from statekit.spi.backend import StateBackend, SubtaskInfo
from statekit.spi.descriptors import TIMER_STATE_PREFIX
from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import KeyGroupsStateHandle, OperatorStateHandle, StateMetaInfo
from statekit.spi.serializer import SerializerSnapshot
from statekit.spi.key_groups import KeyGroupRange, key_group_for_key
from statekit.spi.storage import CheckpointStreams, CompletedCheckpointPointer, SavepointTarget


#: the property a rewritten savepoint's metadata records
REWRITTEN = "rewritten"


class KeyedStateTransform(ABC):
    """Turns a key's states as the savepoint holds them into the states the new one holds.

    ``reads``: the states it consumes (keyed, in the default namespace); the keys it is called
    for are those with any of them. In ``open`` it gets its states from the two contexts: the
    old (``old.get_state(descriptor)``, with the descriptor that reads the state as written) and
    the new (``new.get_state(descriptor)``, any states not otherwise in the savepoint)."""

    reads: tuple[str, ...] = ()

    def open(self, old: KeyedContext, new: KeyedContext) -> None:
        """Get the states (and keep them on ``self``)."""

    @abstractmethod
    def transform(self, key: Any, old: KeyedContext, new: KeyedContext) -> None:
        """Read ``key``'s old states and write its new ones (both contexts have ``key`` current)."""


@dataclass(frozen=True)
class StateRewrite:
    """What a rewrite changes in one operator's keyed state (``operator_id``: the only one when
    not given)."""

    rename: Mapping[str, str] = field(default_factory=dict)
    drop: frozenset[str] = frozenset()
    transform: KeyedStateTransform | None = None
    operator_id: str | None = None

    def check(self, states: Mapping[str, StateMetaInfo]) -> None:
        """A ``ConfigurationError`` naming what the savepoint's states make impossible."""
        reads = set(self.transform.reads) if self.transform else set()
        named = set(self.rename) | set(self.drop) | reads
        unknown = sorted(named - set(states))
        if unknown:
            raise ConfigurationError(f"the rewrite names states {unknown}, which the savepoint does not hold "
                                     f"(it holds {sorted(states)})")
        timers = sorted(n for n in (*self.rename, *self.rename.values(), *self.drop) if n.startswith(TIMER_STATE_PREFIX))
        if timers:
            raise ConfigurationError(f"timer states {timers} cannot be renamed or dropped (a timer state's name is its "
                                     f"timer service's); drop the state its timers serve instead")
        kept = [self.rename.get(n, n) for n in states if n not in self.drop and n not in reads]
        clashes = sorted({n for n in kept if kept.count(n) > 1})
        if clashes:
            raise ConfigurationError(f"after the rewrite, several states would be named {clashes}")

    def passes(self, name: str) -> str | None:
        """The name a state's rows pass through under (None: they do not pass)."""
        if name in self.drop or self.transform is not None and name in self.transform.reads:
            return None
        return self.rename.get(name, name)


def rewrite_subtask(source: CheckpointMetadata, operator: OperatorState, index: int, streams: CheckpointStreams,
                    rewrite: StateRewrite, out: CheckpointStreams, state_backend: StateBackend | None = None,
                    local_dir: str | None = None) -> SubtaskState:
    """Subtask ``index``'s state (at the savepoint's own parallelism) rewritten into ``out``; a
    transform holds the subtask's state in ``state_backend`` (default: heap)."""
    keyed = assign(operator, index, operator.parallelism).keyed
    if not all(isinstance(h, KeyGroupsStateHandle) for h in keyed):
        raise ConfigurationError("a rewrite reads a savepoint (canonical files); take a savepoint of the checkpoint "
                                 "first (statekit savepoint create)")
    subtask = SubtaskInfo(source.job_id, operator.operator_id, index, operator.parallelism, operator.max_parallelism)
    key_groups = KeyGroupRange.of_subtask(operator.max_parallelism, operator.parallelism, index)
    produced = None
    if rewrite.transform is not None:
        from statekit.backends.heap import HeapStateBackend  # noqa: PLC0415 - the default holder

        produced = _transformed(source, subtask, keyed, streams, rewrite, state_backend or HeapStateBackend(), out,
                                local_dir)
    handles = [h for h in (_passed(handle, streams, rewrite, key_groups, out) for handle in keyed) if h is not None]
    if produced is not None:
        passed = {m.name for h in handles for m in h.states}
        clashes = sorted(passed & {m.name for m in produced.states})
        if clashes:
            raise ConfigurationError(f"{type(rewrite.transform).__name__} writes states {clashes}, which the savepoint "
                                     f"holds and the rewrite keeps: drop or rename them, or read them in the transform")
        handles.append(produced)
    return SubtaskState(tuple(handles), _copied(operator.subtasks[index].operator, streams, out))


def _copied(handle: OperatorStateHandle | None, streams: CheckpointStreams,
            out: CheckpointStreams) -> OperatorStateHandle | None:
    """The subtask's operator state, its file copied byte for byte (its ranges stay valid) into the
    new savepoint, which must not depend on the old one's files."""
    if handle is None:
        return None
    output = out.create_output(name="operator")
    try:
        output.write(streams.read(handle.stream))  # verified against its checksum
        return dataclasses.replace(handle, stream=output.close_and_get_handle())
    except BaseException:
        output.discard()
        raise


def _passed(handle: KeyGroupsStateHandle, streams: CheckpointStreams, rewrite: StateRewrite,
            key_groups: KeyGroupRange, out: CheckpointStreams) -> KeyGroupsStateHandle | None:
    """The handle's rows of the states that pass, renamed, in a new file (None: no rows pass)."""
    writer = CanonicalSnapshotWriter(out.create_output(name="rewrite"))
    try:
        for key_group, batch in read_key_groups(handle, streams, key_groups):
            states = batch.column("state").to_pylist()
            for name, start, end in state_runs(states):
                target = rewrite.passes(name)
                if target is not None:
                    rows = batch.slice(start, end - start)
                    writer.add_columns(key_group, target, rows.column("key"), rows.column("namespace"),
                                       rows.column("user_key"), rows.column("value"))
        metas = [dataclasses.replace(m, name=target)
                 for m in handle.states if (target := rewrite.passes(m.name)) is not None]
        return writer.finish(handle.key_group_range, SerializerSnapshot.from_json(handle.key_serializer), metas)
    except BaseException:
        writer.abort()
        raise


def _transformed(source: CheckpointMetadata, subtask: SubtaskInfo, keyed: Sequence[KeyGroupsStateHandle],
                 streams: CheckpointStreams, rewrite: StateRewrite, state_backend: StateBackend,
                 out: CheckpointStreams, local_dir: str | None) -> KeyGroupsStateHandle | None:
    """What ``rewrite.transform`` writes for the subtask's keys, in a new file."""
    transform = rewrite.transform
    assert transform is not None
    restore = TaskRestore(source.checkpoint_id, keyed, (), streams, share_files=False)
    old = KeyedTask.create(RestoreOnly(), state_backend, subtask, source.checkpoint_id, restore=restore,
                           local_dir=local_dir)
    new = KeyedTask.create(RestoreOnly(), state_backend, subtask, source.checkpoint_id,
                           key_serializer=old.keyed_backend.key_serializer, local_dir=local_dir)
    try:
        old_context, new_context = old.context, new.context
        transform.open(old_context, new_context)
        columns = recorded_key_columns(source.properties, subtask.operator_id)
        types = [c.type for c in columns] if columns else None
        keys = {key for name in transform.reads for key in old.keyed_backend.keys(name)}
        for key in sorted(keys, key=repr):
            key_group = key_group_for_key(key, subtask.max_parallelism, types)
            old.keyed_backend.set_current_key(key, key_group)
            new.keyed_backend.set_current_key(key, key_group)
            transform.transform(key, old_context, new_context)
        written = new.snapshot(SAVEPOINT).write(out).keyed
        return next(iter(written), None)  # type: ignore[return-value]
    finally:
        old.close()
        new.close()


def rewrite_savepoint(location: SavepointTarget, source: CheckpointMetadata, streams: CheckpointStreams,
                      rewrite: StateRewrite, state_backend: StateBackend | None = None, local_dir: str | None = None,
                      ) -> tuple[CheckpointMetadata, CompletedCheckpointPointer]:
    """Write the rewritten savepoint of ``source`` at ``location`` and commit it; on any failure,
    discard what it wrote. Other operators than the rewrite's pass unchanged."""
    operator = rewritten_operator(source, rewrite)
    try:
        subtasks = []
        with progress(f"rewrite of savepoint {source.checkpoint_id}",
                      sum(s.state_size for s in operator.subtasks)) as advance:
            for index in range(operator.parallelism):
                subtasks.append(rewrite_subtask(source, operator, index, streams, rewrite, location.streams,
                                                state_backend, local_dir))
                advance(operator.subtasks[index].state_size)
        return commit_rewrite(location, source, operator, subtasks)
    except BaseException:
        location.discard()
        raise


def rewritten_operator(source: CheckpointMetadata, rewrite: StateRewrite) -> OperatorState:
    """The operator ``rewrite`` changes, once its states allow the rewrite (``StateRewrite.check``)."""
    operator = _operator(source, rewrite.operator_id)
    rewrite.check(operator.states())
    return operator


def commit_rewrite(location: SavepointTarget, source: CheckpointMetadata, operator: OperatorState,
                   subtasks: Sequence[SubtaskState]) -> tuple[CheckpointMetadata, CompletedCheckpointPointer]:
    """Commit the savepoint of ``source`` with ``operator``'s subtasks rewritten."""
    operators = {**source.operators, operator.operator_id: OperatorState(
        operator.operator_id, operator.parallelism, operator.max_parallelism, tuple(subtasks))}
    metadata = CheckpointMetadata(source.checkpoint_id, source.job_id, operators, is_savepoint=True,
                                  properties={**source.properties, REWRITTEN: True})
    return metadata, location.commit(metadata.checkpoint_id, metadata.to_bytes())


def _operator(source: CheckpointMetadata, operator_id: str | None) -> OperatorState:
    if operator_id is not None:
        return source.operator(operator_id)
    if len(source.operators) != 1:
        raise ConfigurationError(f"the savepoint holds operators {sorted(source.operators)}: say which one to rewrite")
    return next(iter(source.operators.values()))
