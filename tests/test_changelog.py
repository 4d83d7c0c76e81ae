"""Changelog incremental snapshots: cost proportional to churn, compaction into a new base, and
retention deleting superseded files. Runs for every backend that writes changelog chains."""
import os

import pytest

from statekit.backends.common.changelog import ChangelogStateHandle
from statekit.backends.heap import HeapStateBackend
from statekit.runtime import KeyedProcessFunction, LocalRunner
from statekit.serializers import BytesSerializer
from statekit.spi import ConfigurationError, ValueStateDescriptor
from statekit.storage.filesystem import FileSystemCheckpointStorage

VALUE = ValueStateDescriptor("value", BytesSerializer())
N_KEYS = 20_000


class Store(KeyedProcessFunction):
    def open(self, ctx):
        self.value = ctx.get_state(VALUE)

    def process(self, row, ctx):
        self.value.update(row[1])


def _rows(keys, version):
    return [(f"key-{k:06d}", os.urandom(48) + version.to_bytes(4, "big")) for k in keys]


def changelog_backends(tmp_path):
    from statekit.backends.lmdb import LMDBStateBackend
    return {"heap": HeapStateBackend(**{"changelog.max-chain-length": "3"}),
            "lmdb": LMDBStateBackend(**{"changelog.max-chain-length": "3", "local-dir": str(tmp_path / "lmdb")})}


@pytest.fixture(params=["heap", "lmdb"])
def runner(request, tmp_path):
    backend = changelog_backends(tmp_path)[request.param]
    return LocalRunner(Store(), lambda row: row[0], parallelism=2, max_parallelism=128, state_backend=backend,
                       storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0),
                       incremental=True, num_retained=2, job_id="changelog")


def _chains(runner):
    return [k for s in runner.latest_metadata().operators[runner.operator_id].subtasks for k in s.keyed]


def _shared_on_disk(runner):
    directory = os.path.join(runner.storage.job_root, "shared")
    return {f"shared/{name}" for name in os.listdir(directory)}


def _referenced(runner):
    return {h.path for c in runner.store.completed() for s in c.metadata.operators[runner.operator_id].subtasks
            for k in s.keyed for h in k.stream_handles()}


def test_one_percent_churn_writes_a_small_delta_and_the_chain_compacts(runner):
    runner.run_epoch(_rows(range(N_KEYS), 1))
    bases = _chains(runner)
    assert all(isinstance(c, ChangelogStateHandle) and not c.deltas for c in bases)
    base_bytes = sum(c.base.stream.size for c in bases)
    for epoch in range(2, 5):  # three deltas: the chain bound
        runner.run_epoch(_rows(range(epoch, N_KEYS, 100), epoch))  # 1% of the keys
        chains = _chains(runner)
        assert all(len(c.deltas) == epoch - 1 for c in chains), [len(c.deltas) for c in chains]
        delta_bytes = sum(c.deltas[-1].stream.size for c in chains)
        assert delta_bytes < 0.05 * base_bytes, (
            f"epoch {epoch}: 1% churn wrote {delta_bytes} delta bytes, {delta_bytes / base_bytes:.1%} of the "
            f"{base_bytes}-byte base")
        assert {c.base.stream.path for c in chains} == {c.base.stream.path for c in bases}, "the base is reused"
    runner.run_epoch(_rows(range(5, N_KEYS, 100), 5))
    compacted = _chains(runner)
    assert all(not c.deltas for c in compacted), "past max-chain-length a new base is materialized"
    assert not {c.base.stream.path for c in compacted} & {c.base.stream.path for c in bases}
    # retention (2 checkpoints) eventually drops the old chain's files; referenced files stay
    runner.run_epoch(_rows(range(6, N_KEYS, 100), 6))
    assert _referenced(runner) <= _shared_on_disk(runner)
    runner.run_epoch(_rows(range(7, N_KEYS, 100), 7))
    assert _shared_on_disk(runner) == _referenced(runner), "files of the old chain were not deleted"
    assert not {c.base.stream.path for c in bases} & _shared_on_disk(runner)


def test_chain_bytes_bound_materializes_a_new_base(tmp_path):
    backend = HeapStateBackend(**{"changelog.max-chain-bytes-ratio": "0.02"})
    runner = LocalRunner(Store(), lambda row: row[0], parallelism=1, max_parallelism=128, state_backend=backend,
                         storage=FileSystemCheckpointStorage(str(tmp_path / "c"), memory_threshold=0),
                         incremental=True)
    runner.run_epoch(_rows(range(5000), 1))
    runner.run_epoch(_rows(range(0, 5000, 20), 2))  # 5% of the keys: a delta over 2% of the base
    assert len(_chains(runner)[0].deltas) == 1
    runner.run_epoch(_rows(range(1, 5000, 100), 3))
    assert not _chains(runner)[0].deltas, "a chain over the byte bound is compacted"


def test_bad_changelog_options_name_the_setting():
    with pytest.raises(ConfigurationError, match="spark.statekit.backend.heap.changelog.max-chain-length"):
        HeapStateBackend(**{"changelog.max-chain-length": "-1"})
    with pytest.raises(ConfigurationError, match="spark.statekit.backend.heap.nope"):
        HeapStateBackend(nope="1")


@pytest.mark.parametrize("changed_keys,scans", [(2, False), (60, True)],
                         ids=["few-cells-read-one-by-one", "many-cells-one-scan"])
def test_a_delta_holds_exactly_the_changed_cells(tmp_path, monkeypatch, changed_keys, scans):
    """A delta reads a changed cell's entries either by a range read per cell or from one scan of
    its key group (when the key group holds few entries per changed cell); either way restoring
    base + delta gives the state: map entries changed, removed and added, maps cleared, new keys.
    Where the state's key groups hold too many entries per changed cell on average (LMDB knows
    its tables' entry counts), the scan is not even tried."""
    from statekit.backends.lmdb import LMDBStateBackend
    from statekit.backends.lmdb.read_snapshot import LMDBView
    from statekit.conformance_tests.base import open_keyed_backend, set_key
    from statekit.serializers import Int64Serializer, StringSerializer
    from statekit.spi import MapStateDescriptor, SnapshotOptions
    from statekit.storage.inline import InlineStreams

    tags = MapStateDescriptor("tags", StringSerializer(), Int64Serializer())
    streams, model = InlineStreams(), {}
    backend = open_keyed_backend(LMDBStateBackend(), str(tmp_path / "a"), max_parallelism=4)

    def put(key, entries):
        set_key(backend, key)
        state = backend.get_state(tags)
        for user_key, value in entries.items():
            state.put(user_key, value)
        model.setdefault(key, {}).update(entries)

    def checkpoint(checkpoint_id):
        handle = backend.snapshot(checkpoint_id, SnapshotOptions(incremental=True)).write(streams)
        backend.notify_checkpoint_complete(checkpoint_id)
        return handle

    try:
        for k in range(80):
            put(f"key-{k}", {f"t{i}": i for i in range(10)})
        checkpoint(1)
        for k in range(changed_keys):
            put(f"key-{k}", {"t3": -1, "new": k})
            set_key(backend, f"key-{k}")
            backend.get_state(tags).remove("t5")
            del model[f"key-{k}"]["t5"]
        set_key(backend, "key-79")
        backend.get_state(tags).clear()
        del model["key-79"]
        put("fresh", {"a": 1})
        scanned = []
        columns_upto = LMDBView.columns_upto
        monkeypatch.setattr(LMDBView, "columns_upto", lambda *args: scanned.append(args) or columns_upto(*args))
        handle = checkpoint(2)
        assert isinstance(handle, ChangelogStateHandle) and handle.delta_bytes > 0
        assert bool(scanned) is scans
    finally:
        backend.dispose()
    restored = open_keyed_backend(LMDBStateBackend(), str(tmp_path / "b"), max_parallelism=4,
                                  restore_handles=[handle], restore_streams=streams)
    try:
        held = {}
        for key in list(model) + ["key-79"]:
            set_key(restored, key)
            entries = dict(restored.get_state(tags).items())
            if entries:
                held[key] = entries
        assert held == model
    finally:
        restored.dispose()
