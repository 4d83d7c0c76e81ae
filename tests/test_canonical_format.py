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
