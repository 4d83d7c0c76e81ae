"""The canonical snapshot format: a valid Arrow IPC file, range reads of key groups, checksums."""
import pyarrow as pa
import pytest

from statekit.backends.common.canonical import SCHEMA, CanonicalSnapshotWriter, read_key_groups
from statekit.serializers import PickleSerializer
from statekit.spi import CorruptStateError, KeyGroupRange, SnapshotError, StateMetaInfo
from statekit.storage.inline import InlineStreams


class CountingStreams(InlineStreams):
    """Inline streams that record every range read."""

    def __init__(self):
        self.reads = []

    def read_range(self, handle, offset, length):
        self.reads.append((offset, length))
        return super().read_range(handle, offset, length)


def _write(key_groups, rows_per_group=3, big_group=None):
    streams = InlineStreams()
    writer = CanonicalSnapshotWriter(streams.create_output())
    for kg in key_groups:
        n = 70_000 if kg == big_group else rows_per_group
        keys = [f"k{kg}-{i}".encode() for i in range(n)]
        writer.add_rows(kg, "s", keys, [b""] * n, None, [b"v%d" % i for i in range(n)])
        writer.add_rows(kg, "m", keys[:1], [b"ns"], [b"uk"], [b"mv"])
    meta = StateMetaInfo("s", "value", {"value": PickleSerializer().snapshot().to_json()})
    return writer.finish(KeyGroupRange(0, 127), PickleSerializer().snapshot(), [meta])


def test_file_is_a_valid_arrow_ipc_file():
    handle = _write(range(0, 128, 5))
    table = pa.ipc.open_file(pa.py_buffer(handle.stream.data)).read_all()
    assert table.schema == SCHEMA
    assert table.num_rows == len(range(0, 128, 5)) * 4


def test_range_read_touches_only_wanted_key_groups():
    handle = _write(range(128))
    streams = CountingStreams()
    got = list(read_key_groups(handle, streams, KeyGroupRange(10, 19)))
    assert sorted({kg for kg, _ in got}) == list(range(10, 20))
    assert sum(b.num_rows for _, b in got) == 10 * 4
    assert len(streams.reads) == 1, "contiguous key groups are fetched in one range read"
    offset, length = streams.reads[0]
    assert offset == handle.key_groups[10].offset
    assert offset + length == handle.key_groups[19].end
    assert length < len(handle.stream.data) / 5


def test_large_key_group_spans_several_batches():
    handle = _write([3, 4], big_group=3)
    batches = [b for kg, b in read_key_groups(handle, InlineStreams(), KeyGroupRange(3, 3))]
    assert len(batches) >= 2
    assert sum(b.num_rows for b in batches) == 70_001


def test_empty_snapshot_has_no_handle():
    writer = CanonicalSnapshotWriter(InlineStreams().create_output())
    assert writer.finish(KeyGroupRange(0, 3), PickleSerializer().snapshot(), []) is None


def test_key_groups_out_of_order_are_rejected():
    writer = CanonicalSnapshotWriter(InlineStreams().create_output())
    writer.add_rows(5, "s", [b"k"], [b""], None, [b"v"])
    with pytest.raises(SnapshotError, match="ascending"):
        writer.add_rows(4, "s", [b"k"], [b""], None, [b"v"])


def test_corrupt_key_group_names_it():
    handle = _write(range(8))
    data = bytearray(handle.stream.data)
    data[handle.key_groups[6].offset + 10] ^= 0x01
    from statekit.spi import InlineStateHandle, KeyGroupsStateHandle
    corrupt = KeyGroupsStateHandle(handle.key_group_range, InlineStateHandle(bytes(data)), handle.key_groups,
                                   handle.key_serializer, handle.states)
    assert len(list(read_key_groups(corrupt, InlineStreams(), KeyGroupRange(0, 5)))) > 0  # others still read
    with pytest.raises(CorruptStateError, match="key group 6.*checksum"):
        list(read_key_groups(corrupt, InlineStreams(), KeyGroupRange(0, 7)))


def test_cell_keys_split_at_once_as_one_by_one():
    """Columnar splitting of stored keys (KV snapshots) agrees with ``split_cell_key``, multi-byte
    length prefixes (keys and namespaces of 128 bytes and more) included."""
    from statekit.backends.common.cell_columns import split_cell_keys
    from statekit.backends.common.key_layout import cell_key, key_group_prefix, split_cell_key
    stored = [cell_key(key_group_prefix(kg), b"k" * key_len, b"n" * ns_len) + b"u" * user_len
              for kg, key_len, ns_len, user_len in [(0, 0, 0, 0), (1, 5, 0, 3), (7, 127, 128, 0), (9, 300, 2, 17000),
                                                    (65535, 20000, 16384, 1)]]
    keys, namespaces, user_keys = split_cell_keys(pa.array(stored, pa.binary()).slice(1))
    assert list(zip(keys.to_pylist(), namespaces.to_pylist(), user_keys.to_pylist())) == \
        [split_cell_key(s)[1:] for s in stored[1:]]


def test_a_failing_stream_fails_the_snapshot_and_is_discarded():
    """Chunks are written by a background thread: the stream's error reaches the writer's caller."""
    from statekit.storage.inline import InlineOutputStream

    class FailingOutput(InlineOutputStream):
        discarded = False

        def write(self, data):
            if self.tell() > 0:
                raise SnapshotError("the disk is full")
            return super().write(data)

        def discard(self):
            FailingOutput.discarded = True
            super().discard()

    writer = CanonicalSnapshotWriter(FailingOutput())
    keys = [b"key-%07d" % i for i in range(60_000)]
    with pytest.raises(SnapshotError, match="the disk is full"):
        for kg in range(8):
            writer.add_rows(kg, "s", keys, [b""] * len(keys), None, [b"v" * 40] * len(keys))
        writer.finish(KeyGroupRange(0, 7), PickleSerializer().snapshot(), [])
    writer.abort()
    assert FailingOutput.discarded


# ---------------------------------------------------------------------------- key groups of the keys read


def _job(tmp_path, backend_name, incremental=False, key_types=None, keys=None):
    """A two-subtask job checkpointed once; returns its runner factory."""
    from statekit.conformance_tests.workload import WorkloadFunction, make_rows
    from statekit.registry import backend_class
    from statekit.runtime.local_runner import LocalRunner
    from statekit.storage.filesystem import FileSystemCheckpointStorage

    def runner():
        return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=16,
                           state_backend=backend_class(backend_name)(), key_types=key_types, incremental=incremental,
                           storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0),
                           job_id="renumbered", local_dir=str(tmp_path / "local"))

    rows = make_rows(64, 12, seed=3)
    runner().run_epoch(rows if keys is None else [(keys[i % len(keys)], *row[1:]) for i, row in enumerate(rows)])
    return runner


def renumber_last_key_group(metadata):
    """Give the last key group of subtask 0's index the number of a free key group of its range (the
    job must leave one free), the checksum of ``metadata`` recomputed; returns (old number, new number)."""
    import json

    import xxhash

    body = json.loads(metadata.read_bytes())["body"]
    handle = body["operators"][0]["subtasks"][0]["keyed"][0]
    index = (handle["base"] if handle["type"] == "changelog" else handle)["key_groups"]
    taken = {entry[0] for entry in index}
    original = index[-1][0]
    lowest = index[-2][0] + 1 if len(index) > 1 else handle["key_group_range"][0]  # the index stays in order
    index[-1][0] = next(kg for kg in range(lowest, handle["key_group_range"][1] + 1) if kg not in taken)
    data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    metadata.write_bytes(b'{"magic":"statekit-checkpoint","version":2,"checksum":"'
                         + xxhash.xxh3_64_hexdigest(data).encode() + b'","body":' + data + b"}")
    return original, index[-1][0]


@pytest.mark.parametrize("backend_name,incremental", [("heap", False), ("heap", True), ("rocksdb", False),
                                                      ("lmdb", False), ("lmdb", True)])
def test_a_renumbered_key_group_index_is_refused(tmp_path, backend_name, incremental):
    """Before, the key group's keys were restored under the other key group, where no lookup found them."""
    runner = _job(tmp_path, backend_name, incremental)
    original, renumbered = renumber_last_key_group(tmp_path / "checkpoints" / "renumbered" / "chk-1" / "_metadata")
    with pytest.raises(CorruptStateError, match=rf"key group {renumbered} of snapshot stream '(chk-1|shared)/[^']+' holds "
                                                rf"the key '[^']+', which belongs to key group {original}: its "
                                                rf"handle's key-group index was changed"):
        runner().run_epoch([])


def test_keys_hashed_with_the_jobs_key_types_pass_the_check(tmp_path):
    """Keys are checked with the job's key types (an int column hashes 4 bytes, not 8), and keys of
    several classes key by key: an intact checkpoint restores."""
    for name, key_types, keys in [("int", ["int"], list(range(-40, 40))), ("mixed", None, ["a", 1, 2.5, b"x"])]:
        runner = _job(tmp_path / name, "rocksdb", key_types=key_types, keys=keys)
        restarted = runner()
        restarted.run_epoch([])
        assert restarted.latest_metadata().checkpoint_id == 2


def test_key_groups_of_many_keys_are_those_of_each_key():
    import random

    from statekit.spi.key_groups import key_group_for_key, key_groups_for_keys

    rng = random.Random(7)
    cases = [([f"k{i}" for i in range(2000)], None), ([f"k{i}" for i in range(50)], ["string"]),
             ([rng.randint(-2 ** 63, 2 ** 63 - 1) for _ in range(2000)], None),
             ([rng.randint(-2 ** 63, 2 ** 63 - 1) for _ in range(50)], ["bigint"]),
             ([rng.randint(-2 ** 31, 2 ** 31 - 1) for _ in range(2000)], ["int"]),
             ([True, False], None), ([1.5, -0.0, float("nan")], None), ([("a", 1), ("b", 2)], None), ([], None)]
    for keys, types in cases:
        for max_parallelism in (7, 100, 128, 32768):
            assert key_groups_for_keys(keys, max_parallelism, types) == \
                [key_group_for_key(k, max_parallelism, types) for k in keys], (keys[:3], types, max_parallelism)


# ---------------------------------------------------------------------------- every byte a restore reads


@pytest.mark.parametrize("backend_name", ["heap", "rocksdb"])
@pytest.mark.parametrize("kind", ["keyed", "operator"])
@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_flipped_byte_in_the_head_or_tail_of_a_file_fails_the_restore(tmp_path, backend_name, kind, where):
    """The key groups' and states' checksums cover their batches only; a restore that reads a
    whole file verifies the file's checksum, so the Arrow header and footer are covered too. An
    operator-state file's error names the file and its states."""
    import json

    runner = _job(tmp_path, backend_name)
    job_dir = tmp_path / "checkpoints" / "renumbered"
    subtask = json.loads((job_dir / "chk-1" / "_metadata").read_bytes())["body"]["operators"][0]["subtasks"][0]
    handle = subtask["keyed"][0] if kind == "keyed" else subtask["operator"]
    ranges = [entry[1:3] for entry in handle["key_groups"]] if kind == "keyed" else \
        [r for _, r in handle["states"].values()]
    path = job_dir / handle["stream"]["path"]
    data = bytearray(path.read_bytes())
    offset = min(r[0] for r in ranges) // 2 if where == "head" else (max(r[0] + r[1] for r in ranges) + len(data)) // 2
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    expected = rf"checkpoint file .*{handle['stream']['path']} is corrupt: checksum"
    if kind == "operator":
        expected = rf"operator states \['config', 'epochs', 'rows-seen'\] in file '{handle['stream']['path']}': " + expected
    with pytest.raises(CorruptStateError, match=expected):
        runner().run_epoch([])
