"""The ``snapshot-compression`` backend option: every choice round-trips on every built-in backend,
a snapshot written with one choice restores under any other (readers detect it per batch), and a
bad value is a clear error naming the setting."""
import pyarrow as pa
import pytest

from statekit.backends.common.canonical import COMPRESSIONS, CanonicalSnapshotWriter, read_key_groups
from statekit.registry import backend_class
from statekit.serializers import MsgpackSerializer, StringSerializer
from statekit.spi import (
    ConfigurationError, KeyedBackendParams, KeyGroupRange, ListStateDescriptor, MapStateDescriptor, SnapshotOptions,
    StateMetaInfo, SubtaskInfo, ValueStateDescriptor, key_group_for_key,
)
from statekit.storage.filesystem import FileSystemCheckpointStorage
from statekit.storage.inline import InlineStreams

BACKENDS = ("heap", "rocksdb", "lmdb")
MAX_P = 128
VALUE = ValueStateDescriptor("value", MsgpackSerializer())
LIST = ListStateDescriptor("list", MsgpackSerializer())
MAP = MapStateDescriptor("map", StringSerializer(), MsgpackSerializer())
KEYS = [f"key-{i}" for i in range(300)]


def _backend(name, tmp_path, compression, restore=(), streams=None):
    options = {"snapshot_compression": compression}
    if name != "heap":
        options["local_dir"] = str(tmp_path / "local")
    return backend_class(name)(**options).create_keyed_backend(KeyedBackendParams(
        SubtaskInfo("job", "op", 0, 1, MAX_P), StringSerializer(), restore_handles=tuple(restore),
        restore_streams=streams, local_dir=str(tmp_path / "local")))


def _fill(backend):
    value, items, mapping = backend.get_state(VALUE), backend.get_state(LIST), backend.get_state(MAP)
    for i, key in enumerate(KEYS):
        backend.set_current_key(key, key_group_for_key(key, MAX_P))
        value.update({"n": i, "text": "compressible " * 8})
        items.add_all([i, i + 1, "x" * 40])
        mapping.put(f"user-{i % 7}", [i] * 10)


def _dump(backend):
    value, items, mapping = backend.get_state(VALUE), backend.get_state(LIST), backend.get_state(MAP)
    out = {}
    for key in KEYS:
        backend.set_current_key(key, key_group_for_key(key, MAX_P))
        out[key] = (value.value(), list(items.get()), dict(mapping.items()))
    return out


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("written,read", [(c, r) for c in COMPRESSIONS for r in COMPRESSIONS if c == r or r == "none"]
                         + [("none", "zstd"), ("lz4", "zstd"), ("zstd", "lz4")])
def test_full_snapshot_restores_under_any_choice(tmp_path, backend_name, written, read):
    access = FileSystemCheckpointStorage(str(tmp_path / "checkpoints")).create_access("job")
    source = _backend(backend_name, tmp_path, written)
    _fill(source)
    expected = _dump(source)
    handle = source.snapshot(1, SnapshotOptions()).write(access.streams(1, "op-0"))
    source.dispose()
    restored = _backend(backend_name, tmp_path, read, restore=[handle], streams=access.restore_streams())
    try:
        assert _dump(restored) == expected
    finally:
        restored.dispose()


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_changelog_snapshots_restore_across_choices(tmp_path, backend_name):
    """An incremental chain whose base and delta were written with different choices restores."""
    access = FileSystemCheckpointStorage(str(tmp_path / "checkpoints")).create_access("job")
    backend = _backend(backend_name, tmp_path, "zstd")
    _fill(backend)
    backend.snapshot(1, SnapshotOptions(incremental=True)).write(access.streams(1, "op-0"))
    backend.notify_checkpoint_complete(1)
    backend.snapshot_compression = "lz4"
    backend.set_current_key(KEYS[0], key_group_for_key(KEYS[0], MAX_P))
    backend.get_state(VALUE).update("changed")
    handle = backend.snapshot(2, SnapshotOptions(incremental=True)).write(access.streams(2, "op-0"))
    expected = _dump(backend)
    backend.dispose()
    restored = _backend(backend_name, tmp_path, "none", restore=[handle], streams=access.restore_streams())
    try:
        assert _dump(restored) == expected
    finally:
        restored.dispose()


def _written(compression):
    streams = InlineStreams()
    writer = CanonicalSnapshotWriter(streams.create_output(), compression=compression)
    for kg in range(4):
        keys = [b"key-%05d" % i for i in range(2000)]
        writer.add_rows(kg, "s", keys, [b""] * len(keys), None, [b"value " * 10] * len(keys))
    meta = StateMetaInfo("s", "value", {"value": MsgpackSerializer().snapshot().to_json()})
    return writer.finish(KeyGroupRange(0, 3), StringSerializer().snapshot(), [meta])


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_files_are_smaller_valid_arrow_files(compression):
    plain, compressed = _written("none"), _written(compression)
    assert compressed.stream.size < plain.stream.size / 3
    table = pa.ipc.open_file(pa.py_buffer(compressed.stream.data)).read_all()
    assert table.equals(pa.ipc.open_file(pa.py_buffer(plain.stream.data)).read_all())
    rows = sum(batch.num_rows for _, batch in read_key_groups(compressed, InlineStreams(), KeyGroupRange(1, 2)))
    assert rows == 4000


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_bad_choice_names_the_setting_and_the_choices(backend_name):
    with pytest.raises(ConfigurationError, match=rf"spark\.statekit\.backend\.{backend_name}\.snapshot-compression "
                                                 r"must be one of none, lz4, zstd, got 'snappy'"):
        backend_class(backend_name)(snapshot_compression="snappy")


def test_choice_is_case_insensitive():
    assert backend_class("heap")(**{"snapshot-compression": "ZSTD"}).snapshot_compression == "zstd"
