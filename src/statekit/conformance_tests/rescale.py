"""Rescale level: checkpoint at one parallelism, continue at another, and compare every key and
value with an oracle; operator state redistribution, from checkpoints and from savepoints."""
from __future__ import annotations

from typing import Any

import pytest

from statekit.checkpoint.assignment import assign
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.base import BackendTestBase
from statekit.conformance_tests.compare import assert_same_rows, assert_same_state
from statekit.conformance_tests.snapshot_support import MAX_P, SNAPSHOT_MODES, snapshot_options_for
from statekit.conformance_tests.workload import (
    WorkloadFunction, dump_state, expected_outputs, expected_state, make_rows,
)
from statekit.runtime.local_runner import LocalRunner
from statekit.serializers import Int64Serializer, StringSerializer
from statekit.spi import OperatorBackendParams, OperatorStateBackend, StateBackend, SubtaskInfo
from statekit.spi.errors import ConfigurationError, SerializationError, StateAccessError
from statekit.spi.storage import CheckpointStorage, CheckpointStreams
from statekit.storage.inline import InlineStreams

RESCALE_MATRIX = [(4, 2), (2, 4), (2, 2), (15, 77), (77, 15)]


class RescaleTests(BackendTestBase):
    """Checkpoint at one parallelism, continue at another, compare every key with the oracle."""

    @pytest.fixture
    def checkpoint_storage(self) -> CheckpointStorage | None:
        """The storage the rescaled jobs checkpoint to; None = the ``jobmanager`` storage."""
        return None

    @pytest.mark.parametrize("mode", SNAPSHOT_MODES)
    @pytest.mark.parametrize("old,new", RESCALE_MATRIX, ids=[f"{a}to{b}" for a, b in RESCALE_MATRIX])
    def test_rescale_matrix(self, state_backend, checkpoint_storage, tmp_path, old, new, mode):
        rows_1, rows_2 = make_rows(3000, 800, seed=old), make_rows(2000, 800, seed=new + 1000)
        options = snapshot_options_for(mode, state_backend)
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=old, max_parallelism=MAX_P,
                             state_backend=state_backend, local_dir=str(tmp_path / "local"),
                             storage=checkpoint_storage, job_id=f"rescale-{old}-{new}-{mode}",
                             incremental=options.incremental, checkpoint_format=options.format)
        runner.run_epoch(rows_1)
        runner.rescale(new)
        outputs = runner.run_epoch(rows_2)
        assert_same_rows(outputs, expected_outputs(rows_2, rows_1), f"outputs after rescale {old}->{new}")
        found = dump_state(runner.latest_metadata(), runner.streams, str(tmp_path), state_backend=state_backend,
                           parallelism=new, operator_id=runner.operator_id)
        assert_same_state(found, expected_state(rows_1 + rows_2), f"state after rescale {old}->{new}")

    @pytest.mark.parametrize("old,new", [(4, 2), (2, 3)], ids=["4to2", "2to3"])
    def test_operator_state_redistribution(self, state_backend, checkpoint_storage, tmp_path, old, new):
        rows = make_rows(1000, 200, seed=7)
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=old, max_parallelism=MAX_P,
                             state_backend=state_backend, local_dir=str(tmp_path / "local"),
                             storage=checkpoint_storage, job_id=f"redistribute-{old}-{new}")
        runner.run_epoch(rows)
        runner.rescale(new)
        runner.run_epoch([])
        metadata = runner.latest_metadata()
        assert metadata is not None
        seen_rows: list[int] = []
        for state in _operator_states(state_backend, metadata, runner.streams, runner.operator_id, new):
            seen_rows.extend(state["list"])
            assert set(state["union"]) == {1, 2}, "union list state must give every subtask every element"
            assert state["broadcast"] == {"categories": ["a", "b", "c", "d"]}
        assert sum(seen_rows) == len(rows), "list state elements were lost or duplicated on redistribution"
        assert len(seen_rows) == old + new, "every element of list state goes to exactly one subtask"

    @pytest.mark.parametrize("new", [2, 3], ids=["same-parallelism", "rescaled"])
    def test_operator_state_restores_alike_from_checkpoint_and_savepoint(self, state_backend, checkpoint_storage,
                                                                         tmp_path, new):
        """A savepoint holds each subtask's operator state as the checkpoint it was made from did:
        list, union list and broadcast state restore identically from either."""
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                             state_backend=state_backend, local_dir=str(tmp_path / "local"),
                             storage=checkpoint_storage, job_id=f"operator-state-from-savepoint-{new}")
        runner.run_epoch(make_rows(400, 100, seed=11))
        runner.run_epoch(make_rows(400, 100, seed=12))  # every subtask's union state now holds every epoch
        checkpoint = runner.latest_metadata()
        assert checkpoint is not None
        from_checkpoint = _operator_states(state_backend, checkpoint, runner.streams, runner.operator_id, new)
        from_savepoint = _operator_states(state_backend, runner.savepoint(), InlineStreams(), runner.operator_id, new)
        assert from_checkpoint[0]["union"], "the workload's union list state is empty"
        for index, (expected, found) in enumerate(zip(from_checkpoint, from_savepoint)):
            assert found == expected, (f"subtask {index} of {new}: operator state restored from the savepoint "
                                       f"differs from the checkpoint's: {found} != {expected}")


    def test_operator_state_registered_again_with_other_serializers_is_refused(self, state_backend):
        """As keyed state: one name, one set of serializers. A second registration with others
        switched the state's serializer silently, and its snapshot then failed on the elements
        written as the first serializer's type."""
        backend = _fresh_operator_backend(state_backend)
        try:
            backend.get_list_state("offsets", Int64Serializer()).add(7)
            backend.get_broadcast_state("rules", StringSerializer(), Int64Serializer()).put("a", 1)
            with pytest.raises(StateAccessError, match="'offsets'.*other serializers"):
                backend.get_list_state("offsets", StringSerializer())
            with pytest.raises(StateAccessError, match="'rules'.*other serializers"):
                backend.get_broadcast_state("rules", StringSerializer(), StringSerializer())
            assert backend.get_list_state("offsets", Int64Serializer()).get() == [7]
            assert dict(backend.get_broadcast_state("rules", StringSerializer(), Int64Serializer()).items()) == {"a": 1}
            assert backend.snapshot(1).write(InlineStreams()) is not None
        finally:
            backend.dispose()

    @pytest.mark.parametrize("kind", ["list", "union", "broadcast"])
    def test_operator_state_value_its_serializer_rejects_fails_the_snapshot_naming_the_state(self, state_backend,
                                                                                            kind):
        backend = _fresh_operator_backend(state_backend)
        try:
            if kind == "broadcast":
                backend.get_broadcast_state("bad-state", StringSerializer(), Int64Serializer()).put("a", "seven")
            else:
                getter = backend.get_list_state if kind == "list" else backend.get_union_list_state
                getter("bad-state", Int64Serializer()).add("seven")
            with pytest.raises(SerializationError, match="operator state 'bad-state'.*cannot be snapshotted"):
                backend.snapshot(1).write(InlineStreams())
        finally:
            backend.dispose()


    @pytest.mark.parametrize("name", ["", 5, None, ("a",)], ids=["empty", "int", "none", "tuple"])
    def test_operator_state_name_must_be_a_non_empty_string(self, state_backend, name):
        """Checkpoints key operator states by name in JSON: a state named 5 came back as "5", and the
        job's get_list_state(5) then found a new, empty state (a mix of names failed the snapshot
        with a bare TypeError)."""
        backend = _fresh_operator_backend(state_backend)
        try:
            for register in (backend.get_list_state, backend.get_union_list_state, backend.get_broadcast_state):
                with pytest.raises(ConfigurationError, match="operator state name must be a non-empty string"):
                    register(name)
        finally:
            backend.dispose()


    def test_operator_state_values_are_copies(self, state_backend):
        """As keyed state's (README): a value read is the caller's own copy and a value written is
        copied, so changing either in place changes no state; operator state held the caller's
        objects, and a checkpoint took whatever they had become."""
        backend = _fresh_operator_backend(state_backend)
        try:
            config = {"threshold": 1}
            broadcast = backend.get_broadcast_state("config")
            broadcast.put("rules", config)
            config["threshold"] = 99
            broadcast.get("rules")["threshold"] = 98
            dict(broadcast.items())["rules"]["threshold"] = 97
            element = [1]
            offsets = backend.get_list_state("offsets")
            offsets.add(element)
            offsets.add_all([element])
            element.append(2)
            offsets.get()[0].append(3)
            assert broadcast.get("rules") == {"threshold": 1}, \
                f"broadcast state changed in place: {broadcast.get('rules')}"
            assert offsets.get() == [[1], [1]], f"list state changed in place: {offsets.get()}"
            offsets.update([element])
            element.clear()
            assert offsets.get() == [[1, 2]], f"list state changed in place after update: {offsets.get()}"
        finally:
            backend.dispose()

    def test_operator_list_state_update_takes_any_iterable(self, state_backend):
        np = pytest.importorskip("numpy")
        backend = _fresh_operator_backend(state_backend)
        try:
            offsets = backend.get_list_state("offsets", Int64Serializer())
            offsets.update(np.array([1, 2]).tolist())
            offsets.update(iter([3, 4]))
            assert offsets.get() == [3, 4]
            offsets.update(np.array([5, 6]))  # testing the array for truth failed: "ambiguous"
            assert offsets.get() == [5, 6]
            offsets.update(np.array([], dtype=np.int64))
            assert offsets.get() == []
        finally:
            backend.dispose()

    def test_operator_list_state_add_all_none_is_refused(self, state_backend):
        """As keyed list state, and Flink's operator list state ("List of values to add is null")."""
        backend = _fresh_operator_backend(state_backend)
        try:
            for offsets in (backend.get_list_state("offsets", Int64Serializer()),
                            backend.get_union_list_state("epochs", Int64Serializer())):
                offsets.add(1)
                with pytest.raises(StateAccessError, match=r"add_all\(None\)"):
                    offsets.add_all(None)
                assert offsets.get() == [1], f"a rejected add_all(None) changed the list to {offsets.get()}"
        finally:
            backend.dispose()


def _fresh_operator_backend(state_backend: StateBackend) -> OperatorStateBackend:
    return state_backend.create_operator_backend(OperatorBackendParams(
        SubtaskInfo("conformance-job", "op", 0, 1, MAX_P), (), None))


def _operator_states(state_backend: StateBackend, metadata: CheckpointMetadata, streams: CheckpointStreams,
                     operator_id: str, parallelism: int) -> list[dict[str, Any]]:
    """The workload's operator state of every subtask, restored at ``parallelism``."""
    operator = metadata.operator(operator_id)
    found = []
    for index in range(parallelism):
        backend = state_backend.create_operator_backend(OperatorBackendParams(
            SubtaskInfo(metadata.job_id, operator.operator_id, index, parallelism, operator.max_parallelism),
            assign(operator, index, parallelism).operator, streams))
        try:
            found.append({"list": backend.get_list_state("rows-seen", Int64Serializer()).get(),
                          "union": backend.get_union_list_state("epochs", Int64Serializer()).get(),
                          "broadcast": dict(backend.get_broadcast_state("config").items())})
        finally:
            backend.dispose()
    return found
