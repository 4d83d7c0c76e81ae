"""LMDB specifics: long keys are rejected clearly, the map grows without losing a write (also
while a snapshot is pending and being written on another thread), large iterations read a
snapshot, options are validated, the environment is exclusive to one process, dispose cleans up."""
import os
import subprocess
import sys
import threading

import pytest

from statekit.backends.lmdb import LMDBOptions, LMDBStateBackend, LMDBStore
from statekit.backends.lmdb.table import MATERIALIZE_LIMIT
from statekit.backends.rocksdb import IncrementalRocksDBStateHandle
from statekit.conformance_tests.base import open_keyed_backend, set_key
from statekit.registry import backend_class
from statekit.serializers import BytesSerializer, MsgpackSerializer, StringSerializer
from statekit.spi import (
    ConfigurationError, KeyGroupRange, MapStateDescriptor, RestoreError, SnapshotError, SnapshotFormat,
    SnapshotOptions, StateAccessError, StatekitError, ValueStateDescriptor,
)
from statekit.storage.inline import InlineStreams

VALUE = ValueStateDescriptor("value", BytesSerializer())


def _value(i, size):
    return i.to_bytes(4, "big") * (size // 4)


def _write(backend, keys, size, version=0):
    state = backend.get_state(VALUE)
    for k in keys:
        set_key(backend, f"key-{k:07d}")
        state.update(_value(k + version, size))


def _check(backend, keys, size, version=0):
    state = backend.get_state(VALUE)
    for k in keys:
        set_key(backend, f"key-{k:07d}")
        assert state.value() == _value(k + version, size), f"key-{k:07d} lost or wrong"


@pytest.fixture
def lmdb_backend(tmp_path):
    backend = open_keyed_backend(LMDBStateBackend(**{"map-size": "1m"}), str(tmp_path / "local"))
    yield backend
    backend.dispose()


def test_registered_as_builtin_backend():
    assert backend_class("lmdb") is LMDBStateBackend


# --- long keys
def test_long_key_is_rejected_with_a_clear_error(lmdb_backend):
    state = lmdb_backend.get_state(ValueStateDescriptor("profile", StringSerializer()))
    set_key(lmdb_backend, "k" * 600)
    with pytest.raises(StateAccessError, match=r"'profile'.*of 6\d\d bytes.*maximum key size of 511 bytes.*"
                                               r"smaller keys.*hashes long keys"):
        state.update("v")
    assert state.value() is None  # reading a key too long to be stored finds nothing
    state.clear()
    set_key(lmdb_backend, "k" * 400)  # fits: key group + 400 + prefixes and namespace < 511
    state.update("fits")
    assert state.value() == "fits"


def test_long_map_user_key_is_rejected_and_nothing_is_written(lmdb_backend):
    state = lmdb_backend.get_state(MapStateDescriptor("tags", StringSerializer(), StringSerializer()))
    set_key(lmdb_backend, "k")
    state.put("short", "1")
    with pytest.raises(StateAccessError, match=r"'tags'.*exceeds LMDB's maximum key size"):
        state.put("u" * 520, "2")
    assert dict(state.items()) == {"short": "1"}
    handle = lmdb_backend.snapshot(1).write(InlineStreams())  # the rejected write is not replayed or committed
    assert handle is not None


def test_commit_on_another_thread_is_refused_before_pending_puts_are_written(lmdb_backend):
    """Puts wait in their table (write-behind); a commit from a thread that does not own the write
    transaction is refused before it writes them into that transaction, and nothing is lost."""
    state = lmdb_backend.get_state(VALUE)
    set_key(lmdb_backend, "a")
    state.update(b"1")
    set_key(lmdb_backend, "b")
    assert state.value() is None  # opens the write transaction on this thread
    state.update(b"2")
    errors = []
    thread = threading.Thread(target=lambda: _record_error(lmdb_backend.store.commit, errors))
    thread.start()
    thread.join(30)
    assert errors and "was begun on thread" in str(errors[0]), errors
    assert lmdb_backend._table("value").pending, "the refused commit wrote the pending puts on its thread"
    lmdb_backend.store.commit()
    for key, value in (("a", b"1"), ("b", b"2")):
        set_key(lmdb_backend, key)
        assert state.value() == value, f"{key} lost"


def _record_error(call, errors):
    try:
        call()
    except StatekitError as exc:
        errors.append(exc)


# --- map growth
def test_map_grows_from_one_mib_to_hold_fifty_mb(lmdb_backend, tmp_path):
    n, size = 12_500, 4096  # ~51 MB of values
    _write(lmdb_backend, range(n), size)
    store = lmdb_backend.store
    assert store.growths >= 5 and store.map_size >= 50 << 20, (store.growths, store.map_size)
    assert store.recoveries > 0, "a write transaction larger than the map must have been replayed"
    _check(lmdb_backend, range(n), size)
    handle = lmdb_backend.snapshot(1).write(InlineStreams())
    _write(lmdb_backend, range(0, n, 10), size, version=1)  # after the snapshot: must not be in it
    restored = open_keyed_backend(LMDBStateBackend(**{"map-size": "1m"}), str(tmp_path / "restored"),
                                  restore_handles=[handle], restore_streams=InlineStreams())
    try:
        assert restored.store.growths >= 5
        _check(restored, range(n), size)
        assert sum(1 for _ in restored.keys("value")) == n
    finally:
        restored.dispose()


def test_growth_with_small_write_batches_commits_instead_of_replaying(tmp_path):
    backend = open_keyed_backend(LMDBStateBackend(**{"map-size": "1m", "write-batch-size": "64k"}),
                                 str(tmp_path / "local"))
    try:
        _write(backend, range(5000), 1024)
        _check(backend, range(5000), 1024)
        assert backend.store.growths > 0
    finally:
        backend.dispose()


def test_growth_while_a_snapshot_is_written_on_another_thread(lmdb_backend, tmp_path):
    """The writer thread is paused half-way through the snapshot while processing grows the map
    (which spills the snapshot's read transaction); it then finishes from the spilled copy."""
    n = 3000
    _write(lmdb_backend, range(n), 256)
    pending = lmdb_backend.snapshot(1)
    view = pending._view
    read_columns = view.columns
    paused, resume = threading.Event(), threading.Event()

    def columns(table, lower, upper):
        if lower >= (64).to_bytes(2, "big") and not paused.is_set():  # half-way: key group 64
            paused.set()
            resume.wait(30)
        return read_columns(table, lower, upper)

    view.columns = columns
    streams = InlineStreams()
    result = {}

    def write():
        try:
            result["handle"] = pending.write(streams)
        except BaseException as exc:
            result["error"] = exc

    writer = threading.Thread(target=write)
    writer.start()
    assert paused.wait(30)
    growths = lmdb_backend.store.growths
    _write(lmdb_backend, range(n, n + 8000), 2048, version=7)  # grows the map several times
    _write(lmdb_backend, range(n), 256, version=1)
    lmdb_backend.store.commit()  # puts are write-behind: they reach the map here
    assert lmdb_backend.store.growths > growths and view.snapshot.spilled
    resume.set()
    writer.join(timeout=60)
    assert "error" not in result, repr(result.get("error"))
    restored = open_keyed_backend(LMDBStateBackend(), str(tmp_path / "restored"),
                                  restore_handles=[result["handle"]], restore_streams=streams)
    try:
        assert sum(1 for _ in restored.keys("value")) == n
        _check(restored, range(n), 256)
    finally:
        restored.dispose()
    _check(lmdb_backend, range(n), 256, version=1)
    _check(lmdb_backend, range(n, n + 8000), 2048, version=7)


def test_pending_snapshot_is_spilled_when_the_map_grows(lmdb_backend, tmp_path):
    _write(lmdb_backend, range(2000), 128)
    pending = lmdb_backend.snapshot(1)
    _write(lmdb_backend, range(2000, 6000), 1024)
    _write(lmdb_backend, range(2000), 128, version=3)
    lmdb_backend.store.commit()  # puts are write-behind: they reach the map here
    snapshot = pending._view.snapshot
    assert snapshot.spilled and lmdb_backend.store.spills >= 1
    handle = pending.write(InlineStreams())
    assert not [d for d in os.listdir(lmdb_backend.instance_dir) if d.startswith("spill-")], \
        "the spilled copy must be removed once the snapshot is written"
    restored = open_keyed_backend(LMDBStateBackend(), str(tmp_path / "restored"),
                                  restore_handles=[handle], restore_streams=InlineStreams())
    try:
        _check(restored, range(2000), 128)
        assert sum(1 for _ in restored.keys("value")) == 2000
    finally:
        restored.dispose()


@pytest.mark.parametrize("batch", ["16k", "32m"])
def test_random_writes_with_growth_match_a_model(tmp_path, batch):
    """Puts, deletes and range deletes on two tables with a tiny map: after every growth (with and
    without replay) the tables equal a dict model, and snapshots taken on the way hold their point.
    Reads on the way see every write, whether still pending (``put`` is write-behind) or not."""
    import random
    rng = random.Random(7)
    backend = open_keyed_backend(LMDBStateBackend(**{"map-size": "64k", "write-batch-size": batch}),
                                 str(tmp_path / "local"))
    try:
        tables = {name: backend._table(name) for name in ("a", "b")}
        model = {name: {} for name in tables}
        snapshots = []
        for step in range(6000):
            name = rng.choice("ab")
            table, data = tables[name], model[name]
            key = b"\x00\x01" + b"%05d" % rng.randrange(3000)
            roll = rng.random()
            if roll < 0.7:
                value = os.urandom(rng.choice((8, 100, 3000)))
                table.put(key, value)
                data[key] = value
            elif roll < 0.95:
                table.delete(key)
                data.pop(key, None)
            else:
                upper = key[:-1] + b"\xff"
                table.delete_range(key, upper)
                for k in [k for k in data if key <= k < upper]:
                    del data[k]
            other = b"\x00\x01" + b"%05d" % rng.randrange(3000)
            assert (table.get(key), table.get(other)) == (data.get(key), data.get(other))
            if step % 100 == 99:
                lower, upper = key[:-2], key[:-2] + b"\xff"
                assert dict(table.items(lower, upper)) == {k: v for k, v in data.items() if lower <= k < upper}
            if step % 1500 == 1499:
                snapshots.append((backend._view(), {n: dict(m) for n, m in model.items()}))
        assert backend.store.growths > 3
        for name, table in tables.items():
            assert dict(table.items(b"", b"\xff")) == model[name]
        for view, expected in snapshots:
            for name in tables:
                assert dict(view.items(name, b"", b"\xff")) == expected[name]
            view.release()
        assert backend.store.spills > 0
    finally:
        backend.dispose()


@pytest.mark.parametrize("batch", ["16k", "32m"])
def test_bulk_writes_with_growth_match_a_model(tmp_path, batch):
    """``write_many`` runs (puts cut by the write budget, deletes in between; half of the batches
    have no deletes: one ``putmulti`` unless the budget cuts them) on a tiny map: after every
    growth and replay the table equals a dict model; a key too long for LMDB stops the run there,
    with a clear error, as a loop of puts would."""
    import random
    rng = random.Random(11)
    backend = open_keyed_backend(LMDBStateBackend(**{"map-size": "64k", "write-batch-size": batch}),
                                 str(tmp_path / "local"))
    try:
        table, model = backend._table("a"), {}
        for _ in range(60):
            deletes = 0.2 if rng.random() < 0.5 else 0.0
            entries = [(b"\x00\x01" + b"%05d" % rng.randrange(4000),
                        None if rng.random() < deletes else os.urandom(rng.choice((8, 100, 3000))))
                       for _ in range(rng.randrange(1, 400))]
            table.write_many(entries)
            for key, value in entries:
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
        assert backend.store.growths > 3
        assert backend.store.recoveries > 0 or batch == "16k", "a run larger than the map must have been replayed"
        assert dict(table.items(b"", b"\xff")) == model
        with pytest.raises(StateAccessError, match="exceeds LMDB's maximum key size"):
            table.write_many([(b"\x00\x01before", b"1"), (b"\x00\x01" + b"k" * 600, b"2"), (b"\x00\x01after", b"3")])
        assert table.get(b"\x00\x01before") == b"1" and table.get(b"\x00\x01after") is None
    finally:
        backend.dispose()


# --- large iterations
def test_large_iteration_reads_a_snapshot_and_releases_it(lmdb_backend):
    _write(lmdb_backend, range(5000), 16)
    store = lmdb_backend.store
    keys = lmdb_backend.keys("value")
    _write(lmdb_backend, range(5000, 6000), 16)  # written after keys() was called: not seen
    state = lmdb_backend.get_state(VALUE)
    seen = []
    for key in keys:
        seen.append(key)
        if len(seen) % 100 == 0:
            set_key(lmdb_backend, f"new-{len(seen)}")
            state.update(b"x")
    assert len(seen) == 5000
    assert not store._snapshots, "the iteration's read snapshot must be released at its end"
    abandoned = lmdb_backend.keys("value")
    next(abandoned)
    del abandoned
    state.update(b"y")
    lmdb_backend.snapshot(2).release()  # a safe point: the abandoned iteration's snapshot is released
    assert not store._snapshots and not store._dropped, "an abandoned iteration's read snapshot must be released"


def test_large_iteration_survives_map_growth_mid_range(lmdb_backend):
    _write(lmdb_backend, range(5000), 16)
    store = lmdb_backend.store
    spills = store.spills
    seen = []
    for key in lmdb_backend.keys("value"):
        seen.append(key)
        if len(seen) == 1500:  # past the first chunks: the rest comes from the spilled copy
            _write(lmdb_backend, range(5000, 9000), 4096)
            store.commit()  # puts are write-behind: they reach the map here
            assert store.spills > spills
    assert sorted(seen) == [f"key-{k:07d}" for k in range(5000)]
    assert not store._snapshots and not [d for d in os.listdir(lmdb_backend.instance_dir) if d.startswith("spill")]


def test_big_map_iteration_while_mutating_sees_the_start(lmdb_backend):
    state = lmdb_backend.get_state(MapStateDescriptor("m", StringSerializer(), BytesSerializer()))
    set_key(lmdb_backend, "k")
    original = {f"u{i:05d}": b"v%d" % i for i in range(3000)}
    state.put_all(original)
    seen = {}
    for i, (user_key, value) in enumerate(state.items()):
        seen[user_key] = value
        state.remove(user_key)
        state.put(f"z{i}", b"new")
    assert seen == original
    remaining = list(state.keys())
    assert len(remaining) == 3000 and all(k.startswith("z") for k in remaining)


# --- switching backends
def _workload_runner(tmp_path, backend, parallelism, job_id, incremental=False,
                     checkpoint_format=SnapshotFormat.CANONICAL):
    """A local job of the conformance workload, checkpointed as files under ``tmp_path/checkpoints``."""
    from statekit.conformance_tests.workload import WorkloadFunction
    from statekit.runtime import LocalRunner
    from statekit.storage.filesystem import FileSystemCheckpointStorage

    return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=parallelism, max_parallelism=128,
                       state_backend=backend, job_id=job_id, incremental=incremental,
                       local_dir=str(tmp_path / "local"), checkpoint_format=checkpoint_format,
                       storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints")))


def test_heap_changelog_checkpoint_into_lmdb_and_a_savepoint_back_to_heap(tmp_path):
    from statekit.backends.common.changelog import ChangelogStateHandle
    from statekit.backends.heap import HeapStateBackend
    from statekit.checkpoint.metadata import CheckpointMetadata
    from statekit.conformance_tests.workload import dump_state, expected_key_state, make_rows, oracle
    from statekit.storage.pointers import resolve

    def runner(backend, parallelism, job_id, incremental=False):
        return _workload_runner(tmp_path, backend, parallelism, job_id, incremental)

    rows = [make_rows(1500, 400, seed) for seed in range(4)]
    heap = runner(HeapStateBackend(), 4, "heap-job", incremental=True)
    heap.run_epoch(rows[0])
    heap.run_epoch(rows[1])
    chains = [k for s in heap.latest_metadata().operators[heap.operator_id].subtasks for k in s.keyed]
    assert chains and all(isinstance(k, ChangelogStateHandle) for k in chains)
    lmdb_job = runner(LMDBStateBackend(**{"map-size": "256k"}), 3, "lmdb-job")
    lmdb_job.restore_from(heap.latest_metadata(), heap.streams)
    lmdb_job.run_epoch(rows[2])
    want = {k: expected_key_state(v) for k, v in oracle(rows[0] + rows[1] + rows[2]).items()}
    assert dump_state(lmdb_job.latest_metadata(), lmdb_job.streams, str(tmp_path / "d1"),
                      state_backend=LMDBStateBackend()) == want
    taken = lmdb_job.savepoint(str(tmp_path / "savepoints"))
    savepoint = resolve(str(tmp_path / "savepoints" / f"savepoint-lmdb-job-{taken.checkpoint_id}"))
    back = runner(HeapStateBackend(), 5, "heap-again")
    back.restore_from(CheckpointMetadata.from_bytes(savepoint.metadata), savepoint.streams)
    back.run_epoch(rows[3])
    want = {k: expected_key_state(v) for k, v in oracle(rows[0] + rows[1] + rows[2] + rows[3]).items()}
    assert dump_state(back.latest_metadata(), back.streams, str(tmp_path / "d2")) == want


def test_a_savepoint_of_a_native_checkpoint_holds_every_key_through_a_switch_to_heap(tmp_path):
    """A native checkpoint restored at its own key groups is put in place as the environment: the
    savepoint conversion, which registers no state, must still find every state in it (it wrote an
    empty savepoint, and the state reader found no cell). Then a switch to the heap backend from
    that savepoint holds every key."""
    from statekit.backends.heap import HeapStateBackend
    from statekit.checkpoint.metadata import CheckpointMetadata
    from statekit.conformance_tests.compare import assert_same_rows, assert_same_state
    from statekit.conformance_tests.workload import cell_rows, dump_state, expected_state, make_rows, oracle_cells
    from statekit.reading.snapshot_reader import SnapshotReader
    from statekit.storage.pointers import resolve

    rows = [make_rows(1500, 400, seed) for seed in range(3)]
    job = _workload_runner(tmp_path, LMDBStateBackend(**{"map-size": "256k"}), 2, "lmdb-native",
                           checkpoint_format=SnapshotFormat.NATIVE)
    job.run_epoch(rows[0])
    job.run_epoch(rows[1])
    taken = job.savepoint(str(tmp_path / "savepoints"))
    assert all(s.keyed for s in taken.operator(job.operator_id).subtasks), "a subtask's savepoint holds no state"
    savepoint = resolve(str(tmp_path / "savepoints" / f"savepoint-lmdb-native-{taken.checkpoint_id}"))
    heap = _workload_runner(tmp_path, HeapStateBackend(), 3, "heap-from-native")
    heap.restore_from(CheckpointMetadata.from_bytes(savepoint.metadata), savepoint.streams)
    heap.run_epoch(rows[2])
    assert_same_state(dump_state(heap.latest_metadata(), heap.streams, str(tmp_path / "dump")),
                      expected_state(rows[0] + rows[1] + rows[2]), "the heap job switched to from the savepoint")
    reader = SnapshotReader.open(str(tmp_path / "checkpoints" / "lmdb-native"))
    operator = reader.operator()
    cells = cell_rows(cell for index in range(2) for cell in reader.cells(operator, index, 2))
    assert_same_rows(cells, oracle_cells(rows[0] + rows[1]), "the native checkpoint read at its own parallelism")


def test_a_native_checkpoint_of_more_states_than_max_dbs_is_a_clear_error(tmp_path):
    """The restored environment's databases are all opened: more than ``max-dbs`` allows names the setting."""
    backend = open_keyed_backend(LMDBStateBackend(), str(tmp_path / "old"))
    try:
        set_key(backend, "k")
        for name in ("a", "b", "c"):
            backend.get_state(ValueStateDescriptor(name)).update(name)
        handle = backend.snapshot(1, SnapshotOptions(format=SnapshotFormat.NATIVE)).write(InlineStreams())
    finally:
        backend.dispose()
    with pytest.raises(RestoreError, match="holds 3 named databases.*raise spark.statekit.backend.lmdb.max-dbs"):
        open_keyed_backend(LMDBStateBackend(**{"max-dbs": "2"}), str(tmp_path / "new"), restore_handles=[handle],
                           restore_streams=InlineStreams())
    left = [name for _, _, files in os.walk(tmp_path / "new") for name in files]
    assert not left, f"the failed restore left files behind: {left}"


# --- options
@pytest.mark.parametrize("options,setting", [
    ({"map-size": "lots"}, "map-size"),
    ({"map-size": "1k"}, "map-size"),
    ({"max-dbs": "0"}, "max-dbs"),
    ({"max-readers": "many"}, "max-readers"),
    ({"write-batch-size": "-1"}, "write-batch-size"),
    ({"sync": "maybe"}, "sync"),
    ({"writemap": "2"}, "writemap"),
    ({"no-such-option": "1"}, "no-such-option"),
])
def test_bad_options_name_the_setting(options, setting):
    with pytest.raises(ConfigurationError, match=f"spark.statekit.backend.lmdb.{setting}"):
        LMDBStateBackend(**options)


def test_options_are_applied(tmp_path):
    backend = open_keyed_backend(LMDBStateBackend(**{"map-size": "2m", "writemap": "true", "max_dbs": "3"}),
                                 str(tmp_path / "local"))
    try:
        env = backend.store.env
        assert env.flags()["writemap"] and not env.flags()["sync"] and not env.flags()["readahead"]
        assert env.info()["map_size"] == 2 << 20
        for name in ("a", "b", "c"):
            backend.get_state(ValueStateDescriptor(name))
        with pytest.raises(StateAccessError, match="spark.statekit.backend.lmdb.max-dbs"):
            backend.get_state(ValueStateDescriptor("d"))
    finally:
        backend.dispose()


def test_other_handle_types_are_rejected(tmp_path):
    handle = IncrementalRocksDBStateHandle(KeyGroupRange(0, 127), 1, "x", {}, {}, MsgpackSerializer().snapshot().to_json(),
                                           ())
    with pytest.raises(RestoreError, match="lmdb backend cannot restore a IncrementalRocksDBStateHandle.*savepoint"):
        open_keyed_backend(LMDBStateBackend(), str(tmp_path / "local"), restore_handles=[handle],
                           restore_streams=InlineStreams())


# --- lifecycle
def test_second_process_gets_a_clear_error(lmdb_backend):
    code = ("import sys\nfrom statekit.backends.lmdb import LMDBOptions, LMDBStore\n"
            "from statekit.spi import StatekitError\n"
            "try:\n    LMDBStore(sys.argv[1], LMDBOptions())\n"
            "except StatekitError as e:\n    print('refused:', e); sys.exit(3)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, "-c", code, lmdb_backend.instance_dir], capture_output=True,
                            text=True, env=env, timeout=60, check=False)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "already open" in result.stdout and f"process {os.getpid()}" in result.stdout, result.stdout
    with pytest.raises(StatekitError, match="already open"):  # and a second opener in this process
        LMDBStore(lmdb_backend.instance_dir, LMDBOptions())


def test_dispose_closes_releases_and_removes_the_directory(tmp_path):
    backend = open_keyed_backend(LMDBStateBackend(), str(tmp_path / "local"))
    _write(backend, range(100), 16)
    pending = backend.snapshot(1)  # a pending snapshot does not keep anything open
    _write(backend, range(100), 16, version=1)  # an open write transaction neither
    instance = backend.instance_dir
    assert os.path.exists(os.path.join(instance, "statekit.lock"))
    backend.dispose()
    assert not os.path.exists(instance)
    pending.release()
    store = LMDBStore(instance, LMDBOptions())  # nothing holds the lock any more
    store.close()
    with pytest.raises(StatekitError, match="disposed"):
        backend.get_state(VALUE).value()
    with pytest.raises(StatekitError, match="disposed"):  # a put is write-behind, yet refused at once
        backend.get_state(VALUE).update(b"late")
    with pytest.raises(StatekitError, match="disposed"):
        backend.get_state(ValueStateDescriptor("another"))


def _refusals_in_a_forked_child(backend, accesses):
    """Fork; the child runs each access, which must raise a StatekitError naming the fork, then
    disposes the backend (leaving the parent's files). The child's exit code: 3 if every access was
    refused, 10 + i if access i was not, 4 on another error."""
    pid = os.fork()
    if pid == 0:
        code = 4
        try:
            refused = []
            for access in accesses:
                try:
                    access()
                    refused.append(False)
                except StatekitError as exc:
                    refused.append("fork" in str(exc))
            code = 3 if all(refused) else 10 + refused.index(False)
        finally:
            try:
                backend.dispose()
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_cannot_use_the_parents_environment(lmdb_backend):
    _write(lmdb_backend, range(10), 16)
    lmdb_backend.snapshot(1).release()  # commits: no write transaction is open at the fork
    set_key(lmdb_backend, "key-0000001")
    state = lmdb_backend.get_state(VALUE)
    # a write first: puts are write-behind
    assert _refusals_in_a_forked_child(lmdb_backend, (lambda: state.update(b"child"), state.value)) == 3
    assert os.path.exists(lmdb_backend.instance_dir)
    _check(lmdb_backend, range(10), 16)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("pending_put", [False, True], ids=["transaction-open", "put-pending"])
def test_forked_child_cannot_use_the_parents_open_write_transaction(lmdb_backend, pending_put, tmp_path):
    """Forked while the write transaction is open (its cursors reading) or while a put is pending:
    the child's reads and writes are refused too, not served by the parent's transaction."""
    _write(lmdb_backend, range(10), 16)
    lmdb_backend.store.commit()
    mapping = lmdb_backend.get_state(MapStateDescriptor("m", StringSerializer(), BytesSerializer()))
    set_key(lmdb_backend, "key-0000001")
    state = lmdb_backend.get_state(VALUE)
    snapshot = lmdb_backend.snapshot(1)  # pending: its read transaction is open at the fork
    state.value(), mapping.contains("x")  # the write transaction and both tables' cursors are open
    if pending_put:
        lmdb_backend.store.commit()
        state.update(b"pending")

    def write_then_release() -> None:
        try:
            snapshot.write(InlineStreams())
        finally:
            snapshot.release()  # must leave the parent's read transaction alone

    accesses = (state.value, lambda: state.update(b"child"), state.clear, lambda: mapping.put("u", b"child"),
                lambda: dict(mapping.items()), write_then_release)
    assert _refusals_in_a_forked_child(lmdb_backend, accesses) == 3  # 10 + i: access i was not refused
    assert state.value() == (b"pending" if pending_put else _value(1, 16))
    _check(lmdb_backend, [k for k in range(10) if k != 1 or not pending_put], 16)
    streams = InlineStreams()
    restored = open_keyed_backend(LMDBStateBackend(), str(tmp_path / "restored"),
                                  restore_handles=[snapshot.write(streams)], restore_streams=streams)
    try:
        _check(restored, range(10), 16)  # the snapshot's point in time: before the pending put
    finally:
        restored.dispose()


def test_first_entry_reads_neither_a_page_nor_a_snapshot(lmdb_backend):
    """A map's ``is_empty`` and a timer queue's head read one entry (``LMDBTable.first``): past
    ``MATERIALIZE_LIMIT`` entries, ``items`` would commit the write transaction and open a read
    snapshot for every call (about 0.3-0.4 ms each, against a few µs on the heap)."""
    store = lmdb_backend.store
    mapping = lmdb_backend.get_state(MapStateDescriptor("m", StringSerializer(), BytesSerializer()))
    set_key(lmdb_backend, "k")
    mapping.put_all({f"u{i:05d}": b"v" for i in range(2 * MATERIALIZE_LIMIT)})
    timers = lmdb_backend.create_timer_queue("_timers/first/event-time")
    for timestamp in range(2 * MATERIALIZE_LIMIT):
        timers.add(timestamp)
    store.commit()
    set_key(lmdb_backend, "other")
    mapping.put("pending", b"x")  # a put pending
    assert not mapping.contains("absent")  # a read: the write transaction is open
    transaction = store.txn
    assert transaction is not None
    assert not mapping.is_empty()
    assert timers.poll(10).timestamp == 0 and timers.peek_timestamp() == 1
    assert store.txn is transaction and not store._snapshots, "a one-entry read committed or opened a snapshot"
    set_key(lmdb_backend, "empty")
    assert mapping.is_empty()
    set_key(lmdb_backend, "other")
    assert not mapping.is_empty() and mapping.get("pending") == b"x"  # the pending put is in the range


def test_a_native_snapshot_written_after_dispose_is_a_snapshot_error(lmdb_backend):
    """The backend's directory is gone with its environment: the copy fails as a SnapshotError
    (not an OSError from making its work directory)."""
    _write(lmdb_backend, range(10), 16)
    pending = lmdb_backend.snapshot(1, SnapshotOptions(format=SnapshotFormat.NATIVE))
    lmdb_backend.dispose()
    with pytest.raises(SnapshotError, match="LMDB"):
        pending.write(InlineStreams())
