"""``_metadata`` is checksummed, validated against its schema and checked for a consistent layout.

* one flipped byte anywhere in the ``_metadata`` of every backend's full and incremental
  checkpoints (heap full, heap changelog, RocksDB incremental, LMDB changelog) is detected with
  an error naming the file, and a restart on it fails with that error;
* hand edits that keep the file well-formed (the checksum recomputed, or a version-1 file,
  which has none) are caught by the schema and layout checks, naming the file and the field;
* version-1 files (written before the checksum) still restore;
* every handle type's ``from_json`` raises ``CorruptStateError`` naming the field.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import xxhash

from statekit.backends.heap import HeapStateBackend
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import WorkloadFunction, dump_state, expected_state, make_rows
from statekit.runtime.local_runner import LocalRunner
from statekit.spi import (
    CorruptStateError, InlineStateHandle, SnapshotFormat, StateHandle, StatekitError, register_handle,
)
from statekit.spi.errors import UntrustedCheckpointError
from statekit.spi.handles import KeyedStateHandle
from statekit.spi.key_groups import KeyGroupRange
from statekit.storage.filesystem import FileSystemCheckpointStorage
from statekit.storage.inline import InlineStreams

JOB = "integrity-job"
MAX_P = 4  # small: a few KB of metadata, and every key group holds keys
ROWS = [make_rows(24, 12, seed=1), make_rows(24, 12, seed=2)]
NATIVE = SnapshotFormat.NATIVE
FLAVOURS: dict[str, tuple[Callable[[], Any], bool, SnapshotFormat]] = {
    "heap-full": (HeapStateBackend, False, SnapshotFormat.CANONICAL),
    "heap-changelog": (HeapStateBackend, True, SnapshotFormat.CANONICAL),
    "heap-native": (HeapStateBackend, False, NATIVE),
    "rocksdb-full": (RocksDBStateBackend, False, SnapshotFormat.CANONICAL),
    "rocksdb-incremental": (RocksDBStateBackend, True, SnapshotFormat.CANONICAL),
    "rocksdb-native": (RocksDBStateBackend, False, NATIVE),
    "lmdb-full": (LMDBStateBackend, False, SnapshotFormat.CANONICAL),
    "lmdb-changelog": (LMDBStateBackend, True, SnapshotFormat.CANONICAL),
    "lmdb-native": (LMDBStateBackend, False, NATIVE),
}
LEGACY_V1 = Path(__file__).parent / "data" / "metadata-v1-heap-inline.json"


@dataclass
class Checkpoint:
    flavour: str
    storage_dir: str
    local_dir: str
    metadata_file: Path

    def runner(self) -> LocalRunner:
        factory, incremental, snapshot_format = FLAVOURS[self.flavour]
        return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                           state_backend=factory(), storage=FileSystemCheckpointStorage(self.storage_dir,
                                                                                        memory_threshold=0),
                           job_id=JOB, incremental=incremental, local_dir=self.local_dir,
                           checkpoint_format=snapshot_format)

    @property
    def source(self) -> str:
        return str(self.metadata_file)

    def body(self) -> dict[str, Any]:
        return json.loads(self.metadata_file.read_bytes())["body"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Checkpoint]:
    """Checkpoint 2 of a two-epoch job per flavour (a changelog chain has a base and a delta)."""
    found = {}
    for flavour in FLAVOURS:
        root = tmp_path_factory.mktemp(flavour)
        checkpoint = Checkpoint(flavour, str(root / "checkpoints"), str(root / "local"),
                                root / "checkpoints" / JOB / "chk-2" / "_metadata")
        runner = checkpoint.runner()
        for rows in ROWS:
            runner.run_epoch(rows)
        assert checkpoint.metadata_file.exists()
        found[flavour] = checkpoint
    return found


def sealed(body: dict[str, Any]) -> bytes:
    """A version-2 file around ``body``, checksum recomputed (what a careful hand edit gives)."""
    data = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return (b'{"magic":"statekit-checkpoint","version":2,"checksum":"' + xxhash.xxh3_64_hexdigest(data).encode()
            + b'","body":' + data + b"}")


def legacy(body: dict[str, Any]) -> bytes:
    """The same document as a version-1 file (no checksum), as statekit wrote it before."""
    return json.dumps({"magic": "statekit-checkpoint", "version": 1, **body}, separators=(",", ":"),
                      sort_keys=True).encode()


# ---------------------------------------------------------------------------- one flipped byte


@pytest.mark.parametrize("mask", [0x01, 0x20], ids=["bit0", "bit5"])
@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_every_flipped_byte_is_detected_naming_the_file(checkpoints, flavour, mask):
    checkpoint = checkpoints[flavour]
    data = checkpoint.metadata_file.read_bytes()
    assert CheckpointMetadata.from_bytes(data, checkpoint.source).checkpoint_id == 2
    missed = []
    for offset in range(len(data)):
        flipped = bytearray(data)
        flipped[offset] ^= mask
        try:
            CheckpointMetadata.from_bytes(bytes(flipped), checkpoint.source)
        except StatekitError as exc:
            if checkpoint.source not in str(exc):
                missed.append(f"offset {offset}: the error does not name the file: {exc}")
        else:
            missed.append(f"offset {offset} ({chr(data[offset])!r} -> {chr(flipped[offset])!r}): not detected")
    assert not missed, f"{len(missed)} of {len(data)} flips of {flavour}'s _metadata:\n" + "\n".join(missed[:20])


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_restart_on_a_flipped_metadata_fails_naming_the_file(checkpoints, flavour):
    checkpoint = checkpoints[flavour]
    original = checkpoint.metadata_file.read_bytes()
    version_digit = original.index(b'"version":') + len(b'"version":')
    checksum_digit = original.index(b'"checksum":"') + len(b'"checksum":"')
    try:
        for offset in (0, version_digit, checksum_digit, len(original) // 2, len(original) - 1):
            flipped = bytearray(original)
            flipped[offset] ^= 0x01
            checkpoint.metadata_file.write_bytes(bytes(flipped))
            with pytest.raises(StatekitError) as caught:
                checkpoint.runner()  # a restart reads every retained checkpoint's _metadata
            assert checkpoint.source in str(caught.value), f"offset {offset}: {caught.value}"
    finally:
        checkpoint.metadata_file.write_bytes(original)
    restarted = checkpoint.runner()  # intact again: it restores and continues
    restarted.run_epoch([])
    assert dump_state(restarted.latest_metadata(), restarted.streams, checkpoint.local_dir + "/dump",
                      state_backend=FLAVOURS[flavour][0]()) == expected_state(ROWS[0] + ROWS[1])


# ---------------------------------------------------------------------------- hand edits


def _keyed_index(handle: dict[str, Any]) -> dict[str, Any]:
    """The canonical handle holding a key-group index (the base of a changelog chain)."""
    return handle["base"] if handle["type"] == "changelog" else handle


def _edit_range_end(body: dict[str, Any]) -> None:
    body["operators"][0]["subtasks"][1]["keyed"][0]["key_group_range"][1] = MAX_P - 2  # was MAX_P - 1


def _move_index_entry_outside(body: dict[str, Any]) -> None:
    _keyed_index(body["operators"][0]["subtasks"][0]["keyed"][0])["key_groups"][0][0] = MAX_P - 1


def _duplicate_index_entry(body: dict[str, Any]) -> None:
    index = _keyed_index(body["operators"][0]["subtasks"][1]["keyed"][0])["key_groups"]
    assert len(index) >= 2, "the test needs a handle with two key groups"
    index[1][0] = index[0][0]


def _move_handle_to_other_subtask(body: dict[str, Any]) -> None:
    subtasks = body["operators"][0]["subtasks"]
    subtasks[0]["keyed"], subtasks[1]["keyed"] = subtasks[1]["keyed"], subtasks[0]["keyed"]


def _drop_keyed_handle_field(body: dict[str, Any]) -> None:
    del _keyed_index(body["operators"][0]["subtasks"][0]["keyed"][0])["stream"]["checksum"]


def _drop_max_parallelism(body: dict[str, Any]) -> None:
    del body["operators"][0]["max_parallelism"]


def _parallelism_as_text(body: dict[str, Any]) -> None:
    body["operators"][0]["parallelism"] = "2"


def _parallelism_above_max(body: dict[str, Any]) -> None:
    body["operators"][0]["parallelism"] = MAX_P + 1


def _one_subtask_missing(body: dict[str, Any]) -> None:
    body["operators"][0]["subtasks"].pop()


def _operator_twice(body: dict[str, Any]) -> None:
    body["operators"].append(copy.deepcopy(body["operators"][0]))


def _unknown_field(body: dict[str, Any]) -> None:
    body["checkpoint_idd"] = 1


def _negative_byte_range(body: dict[str, Any]) -> None:
    _keyed_index(body["operators"][0]["subtasks"][0]["keyed"][0])["key_groups"][0][2] = -5


def _byte_range_past_the_stream(body: dict[str, Any]) -> None:
    handle = _keyed_index(body["operators"][0]["subtasks"][0]["keyed"][0])
    handle["key_groups"][-1][2] += handle["stream"]["size"]


def _unknown_operator_mode(body: dict[str, Any]) -> None:
    states = body["operators"][0]["subtasks"][0]["operator"]["states"]
    states["epochs"][0] = "onion"


HAND_EDITS = {
    # edit: (what it does, a pattern the error must contain: the JSON path and the problem)
    "range-end": (_edit_range_end, r"subtasks\[1\]\.keyed\[0\].*(outside|not all of the key groups|not the chain.s)"),
    "index-outside": (_move_index_entry_outside, r"subtasks\[0\]\.keyed\[0\].*key_groups\[0\]\[0\].*outside"),
    "index-duplicate": (_duplicate_index_entry, r"subtasks\[1\]\.keyed\[0\].*key_groups\[1\]\[0\].*appears twice"),
    "handles-swapped": (_move_handle_to_other_subtask, r"subtasks\[0\]\.keyed\[0\]\.key_group_range.*owns"),
    "missing-stream-checksum": (_drop_keyed_handle_field, r"keyed\[0\].*stream\.checksum is missing"),
    "missing-max-parallelism": (_drop_max_parallelism, r"operators\[0\]\.max_parallelism is missing"),
    "parallelism-text": (_parallelism_as_text, r"operators\[0\]\.parallelism must be an integer"),
    "parallelism-above-max": (_parallelism_above_max, r"operators\[0\]\.parallelism must be an integer in \[1, 4\]"),
    "subtask-missing": (_one_subtask_missing, r"operators\[0\]\.subtasks must have 2 elements, not 1"),
    "operator-twice": (_operator_twice, r"operators\[1\]\.operator_id repeats an operator id"),
    "unknown-field": (_unknown_field, r"unknown field.*checkpoint_idd"),
    "negative-length": (_negative_byte_range, r"key_groups\[0\]\[2\] must be an integer >= 0"),
    "range-past-stream": (_byte_range_past_the_stream, r"key_groups gives key group \d+ bytes .* beyond"),
    "operator-mode": (_unknown_operator_mode, r"operator\.states\.epochs\[0\] must be one of"),
}


@pytest.mark.parametrize("encode", [sealed, legacy], ids=["v2-resealed", "v1"])
@pytest.mark.parametrize("edit", list(HAND_EDITS))
@pytest.mark.parametrize("flavour", ["heap-full", "heap-changelog"])
def test_hand_edited_metadata_is_rejected_naming_file_and_field(checkpoints, flavour, edit, encode):
    checkpoint = checkpoints[flavour]
    body = checkpoint.body()
    CheckpointMetadata.from_bytes(encode(body), checkpoint.source)  # unedited, both encodings read
    change, pattern = HAND_EDITS[edit]
    change(body)
    with pytest.raises(CorruptStateError) as caught:
        CheckpointMetadata.from_bytes(encode(body), checkpoint.source)
    message = str(caught.value)
    assert message.startswith(f"{checkpoint.source} is corrupt: "), message
    assert re.search(pattern, message), f"{pattern!r} not in: {message}"


def test_edited_range_end_in_a_rocksdb_handle_is_rejected(checkpoints):
    checkpoint = checkpoints["rocksdb-incremental"]
    body = checkpoint.body()
    _edit_range_end(body)
    with pytest.raises(CorruptStateError, match=r"subtasks\[1\]\.keyed.*not all of the key groups \[2, 3\]"):
        CheckpointMetadata.from_bytes(sealed(body), checkpoint.source)


@pytest.mark.parametrize("data,message", [
    (b'{"operators": [], "checkpoint_id": 1}', "valid JSON but not statekit checkpoint metadata"),
    (b"[1, 2, 3]", "valid JSON but not statekit checkpoint metadata"),
    (b'{"magic": "statekit-checkpoint", "version": 2, "body": {}}', "envelope is damaged"),
    (b"\x00\x01 not json", "not valid metadata JSON"),
    (b"", "not valid metadata JSON"),
], ids=["foreign-object", "foreign-array", "reformatted-envelope", "binary", "empty"])
def test_files_that_are_not_statekit_metadata_say_so(data, message):
    with pytest.raises(CorruptStateError, match=message) as caught:
        CheckpointMetadata.from_bytes(data, "s3://bucket/job/chk-9/_metadata")
    assert "s3://bucket/job/chk-9/_metadata" in str(caught.value)


def test_a_newer_format_version_names_the_version(checkpoints):
    data = checkpoints["heap-full"].metadata_file.read_bytes().replace(b'"version":2', b'"version":7', 1)
    with pytest.raises(StatekitError, match=r"x/_metadata has metadata format version 7; this statekit reads "
                                            r"versions 1 to 3"):
        CheckpointMetadata.from_bytes(data, "x/_metadata")


def test_the_file_is_json_with_the_document_as_its_body(checkpoints):
    checkpoint = checkpoints["lmdb-changelog"]
    doc = json.loads(checkpoint.metadata_file.read_bytes())
    assert list(doc) == ["magic", "version", "checksum", "body"]
    assert doc["magic"] == "statekit-checkpoint" and doc["version"] == 2
    assert sealed(doc["body"]) == checkpoint.metadata_file.read_bytes()


# ---------------------------------------------------------------------------- names that become paths


ESCAPING_NAMES = ["../CURRENT", "../../../../tmp/x", "/tmp/x", "a/../../x", "./x", "a//x", "x/", "", ".", "..",
                  "a\\..\\..\\x", "C:x", "x\0y"]


def _rocksdb_files(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return body["operators"][0]["subtasks"][0]["keyed"][0][kind]


@pytest.mark.parametrize("name", ESCAPING_NAMES)
@pytest.mark.parametrize("where", ["rocksdb-incremental/shared", "rocksdb-incremental/private",
                                   "rocksdb-native/private", "heap-full/stream"])
def test_a_name_that_would_leave_its_directory_is_refused(checkpoints, where, name):
    """A RocksDB file name becomes a file of the local instance directory, a stream's path one of
    the storage: metadata giving one that is absolute, climbs out (``..``) or is not normalized is
    refused, naming the file and the field, before anything is read or written."""
    flavour, kind = where.split("/")
    checkpoint = checkpoints[flavour]
    body = checkpoint.body()
    if kind == "stream":
        body["operators"][0]["subtasks"][0]["keyed"][0]["stream"]["path"] = name
    else:
        files = _rocksdb_files(body, kind)
        files[name] = files.pop(sorted(files)[0])
    with pytest.raises(CorruptStateError) as caught:
        CheckpointMetadata.from_bytes(sealed(body), checkpoint.source)
    message = str(caught.value)
    assert message.startswith(f"{checkpoint.source} is corrupt: field $.body.operators[0].subtasks[0].keyed[0]."), \
        message
    expected = ("a file name inside the RocksDB instance directory" if kind != "stream" else
                "must be a non-empty string" if not name else "a normalized relative path inside the checkpoint root")
    assert expected in message, message


@pytest.mark.parametrize("name", ["{outside}", "../../../../../../../../..{outside}", "../escaped-CURRENT"])
def test_a_rocksdb_file_name_from_metadata_never_writes_outside_the_local_directory(tmp_path, name):
    """A restart, ``statekit savepoint create --from`` and a restore by path refuse the checkpoint;
    before, the file was written where the name pointed and the restore failed with a bare
    ``Exception: IO error``."""
    from statekit.inspection import create_savepoint
    from statekit.storage.pointers import resolve

    checkpoint = Checkpoint("rocksdb-incremental", str(tmp_path / "checkpoints"), str(tmp_path / "local"),
                            tmp_path / "checkpoints" / JOB / "chk-1" / "_metadata")
    checkpoint.runner().run_epoch(ROWS[0])
    outside = tmp_path / "outside" / "CURRENT"
    outside.parent.mkdir()
    name = name.format(outside=outside)
    body = checkpoint.body()
    files = _rocksdb_files(body, "private")
    files[name] = files.pop("CURRENT")
    checkpoint.metadata_file.write_bytes(sealed(body))
    attempts = {"restart": lambda: checkpoint.runner().run_epoch([]),
                "savepoint create": lambda: create_savepoint(checkpoint.metadata_file.parent.as_uri(),
                                                             str(tmp_path / "savepoints"), "rocksdb"),
                "restore by path": lambda: CheckpointMetadata.from_bytes(
                    resolve(str(checkpoint.metadata_file)).metadata, checkpoint.source)}
    for what, attempt in attempts.items():
        with pytest.raises(CorruptStateError, match=r"_metadata is corrupt: field .*private\[") as caught:
            attempt()
        assert "chk-1/_metadata" in str(caught.value), f"{what}: {caught.value}"
    written = [str(p) for p in tmp_path.rglob("*CURRENT*") if "checkpoints" not in p.parts]
    assert not outside.exists() and not written, written


# ---------------------------------------------------------------------------- metadata in another place


def _four_checkpoints(tmp_path: Path, job_id: str = JOB) -> tuple[Path, Callable[[], LocalRunner]]:
    def runner() -> LocalRunner:
        return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                           storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), memory_threshold=0),
                           job_id=job_id, local_dir=str(tmp_path / "local"), num_retained=4)
    first = runner()
    for seed in range(4):
        first.run_epoch(make_rows(24, 12, seed=seed))
    return tmp_path / "checkpoints" / job_id, runner


def _readers_by_location(url: str, tmp_path: Path) -> dict[str, Callable[[], Any]]:
    """Everything that reads a snapshot's _metadata by its location."""
    from statekit.inspection import create_savepoint, describe
    from statekit.query import QueryableState
    from statekit.reading.snapshot_reader import SnapshotReader

    return {"checkpoints describe": lambda: describe(url),
            "savepoint create": lambda: create_savepoint(url, str(tmp_path / "savepoints")),
            "data source": lambda: SnapshotReader.open(url),
            "QueryableState": lambda: QueryableState(url)}


def test_a_stale_metadata_copied_over_a_newer_checkpoint_is_refused(tmp_path):
    """chk-3/_metadata copied over chk-4/_metadata restored as checkpoint 4 with chk-3's state,
    ``savepoint create`` wrote savepoint-<job>-3 and ``describe`` printed checkpoint 3."""
    from statekit.inspection import list_checkpoints

    job_dir, runner = _four_checkpoints(tmp_path)
    (job_dir / "chk-4" / "_metadata").write_bytes((job_dir / "chk-3" / "_metadata").read_bytes())
    source = (job_dir / "chk-4" / "_metadata").as_uri()
    expected = f"{source} is the metadata of checkpoint 3 of job {JOB!r}, but its place is that of checkpoint 4"
    for what, read in {**_readers_by_location(str(job_dir / "chk-4"), tmp_path),
                       "a job directory's latest": _readers_by_location(str(job_dir), tmp_path)["data source"],
                       "restart": runner}.items():
        with pytest.raises(CorruptStateError) as caught:
            read()
        assert str(caught.value).startswith(expected), f"{what}: {caught.value}"
    assert not (tmp_path / "savepoints").exists() or not any((tmp_path / "savepoints").iterdir())
    listed = list_checkpoints(str(job_dir))["jobs"][0]["checkpoints"]
    assert [(c["checkpoint_id"], c["status"]) for c in listed] == \
        [(1, "completed"), (2, "completed"), (3, "completed"), (4, "corrupt")], listed
    assert expected in listed[3]["error"]


def test_a_checkpoint_of_another_job_is_refused_in_this_jobs_directory(tmp_path):
    job_dir, _ = _four_checkpoints(tmp_path)
    other = job_dir.parent / "other-job"
    shutil.copytree(job_dir, other)
    source = (other / "chk-2" / "_metadata").as_uri()
    for what, read in _readers_by_location(str(other / "chk-2"), tmp_path).items():
        with pytest.raises(CorruptStateError) as caught:
            read()
        assert str(caught.value).startswith(f"{source} is the metadata of checkpoint 2 of job {JOB!r}, but its "
                                            f"place is that of checkpoint 2 of job 'other-job'"), \
            f"{what}: {caught.value}"


def test_savepoints_stay_relocatable_but_hold_a_savepoints_metadata(tmp_path):
    """A savepoint directory may be moved and renamed: its id and job are not checked against its
    place. But a checkpoint's _metadata there (its files are relative to its job directory) and a
    savepoint's in a chk-<n> directory are refused."""
    from statekit.inspection import create_savepoint, describe

    job_dir, _ = _four_checkpoints(tmp_path)
    savepoint = Path(create_savepoint(str(job_dir / "chk-2"), str(tmp_path / "savepoints"))["path"][len("file://"):])
    moved = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(savepoint, moved)
    for what, read in _readers_by_location(str(moved), tmp_path / "again").items():
        read()  # every reader accepts the moved savepoint
    assert describe(str(moved))["checkpoint_id"] == 2
    (moved / "_metadata").write_bytes((job_dir / "chk-2" / "_metadata").read_bytes())
    with pytest.raises(CorruptStateError, match=r"is the metadata of checkpoint 2 of job .*, in a savepoint "
                                                r"directory"):
        describe(str(moved))
    (job_dir / "chk-2" / "_metadata").write_bytes((savepoint / "_metadata").read_bytes())
    with pytest.raises(CorruptStateError, match=r"chk-2/_metadata is the metadata of a savepoint \(of checkpoint 2 "
                                                r"of job .*\), but its place is that of checkpoint 2"):
        describe(str(job_dir / "chk-2"))


# ---------------------------------------------------------------------------- version 1


def test_a_version_1_checkpoint_still_restores(tmp_path):
    """The file was written by statekit before the checksum (format version 1): heap backend,
    jobmanager storage (state inline), 2 subtasks, max parallelism 8, ``make_rows(12, 5, seed=18)``."""
    data = LEGACY_V1.read_bytes()
    assert json.loads(data)["version"] == 1
    metadata = CheckpointMetadata.from_bytes(data, str(LEGACY_V1))
    rows = make_rows(12, 5, seed=18)
    assert dump_state(metadata, InlineStreams(), str(tmp_path)) == expected_state(rows)
    # and a job continues from it, rescaled; its keys and values were pickled, so only a job that trusts it
    more = make_rows(12, 5, seed=19)
    untrusting = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=3, max_parallelism=8,
                             job_id="legacy-v1-untrusted")
    untrusting.restore_from(metadata, InlineStreams())
    with pytest.raises(UntrustedCheckpointError, match="PickleSerializer.*trust-pickle"):
        untrusting.run_epoch(more)
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=3, max_parallelism=8,
                         job_id="legacy-v1", trust_pickle=True)
    runner.restore_from(metadata, InlineStreams())
    runner.run_epoch(more)
    assert dump_state(runner.latest_metadata(), runner.streams, str(tmp_path / "after")) == expected_state(rows + more)
    assert sealed(json.loads(runner.storage.read_metadata(runner.storage.latest_completed()))["body"]) \
        == runner.storage.read_metadata(runner.storage.latest_completed()), "new checkpoints are written as version 2"


# ---------------------------------------------------------------------------- handles' from_json


def _handles(checkpoints: dict[str, Checkpoint]) -> dict[str, dict[str, Any]]:
    """One real handle of every built-in type, as JSON."""
    heap_full = checkpoints["heap-full"].body()["operators"][0]["subtasks"][0]
    changelog = checkpoints["heap-changelog"].body()["operators"][0]["subtasks"][0]["keyed"][0]
    rocksdb = checkpoints["rocksdb-incremental"].body()["operators"][0]["subtasks"][0]["keyed"][0]
    lmdb = checkpoints["lmdb-native"].body()["operators"][0]["subtasks"][0]["keyed"][0]
    heap = checkpoints["heap-native"].body()["operators"][0]["subtasks"][0]["keyed"][0]
    return {"file": heap_full["keyed"][0]["stream"], "inline": InlineStateHandle(b"inline bytes").to_json(),
            "key-groups": heap_full["keyed"][0], "operator": heap_full["operator"], "changelog": changelog,
            "rocksdb-incremental": rocksdb, "lmdb-native": lmdb, "heap-native": heap}


OPTIONAL_FIELDS = {"inline": ("checksum",), "key-groups": ("format",)}
WRONG_VALUES = [None, "?", -1, 1.5, True, {}, [], [[]], {"type": "file"}]


@pytest.mark.parametrize("tag", ["file", "inline", "key-groups", "operator", "changelog", "rocksdb-incremental",
                                 "lmdb-native", "heap-native"])
def test_every_handle_field_is_checked_and_named(checkpoints, tag):
    handle = _handles(checkpoints)[tag]
    assert StateHandle.from_json(copy.deepcopy(handle)).to_json() == StateHandle.from_json(handle).to_json()
    for name in handle:
        without = {k: v for k, v in handle.items() if k != name}
        try:
            StateHandle.from_json(without)
        except CorruptStateError as exc:
            assert f"$.{name} is missing" in str(exc), f"dropping {name!r}: {exc}"
        else:
            assert name in OPTIONAL_FIELDS.get(tag, ()), f"a {tag} handle without {name!r} was accepted"
        rejected = 0
        for wrong in WRONG_VALUES:
            try:
                StateHandle.from_json({**handle, name: wrong})
            except CorruptStateError as exc:
                rejected += 1
                assert f"$.{name}" in str(exc), f"{name}={wrong!r}: the error does not name the field: {exc}"
            except StatekitError as exc:  # e.g. an unknown handle type: names the field too
                assert name == "type" and "$.type" in str(exc), f"{name}={wrong!r}: {exc!r}"
                rejected += 1
        assert rejected >= len(WRONG_VALUES) - 2, f"a {tag} handle accepts most wrong values of {name!r}"


def test_nested_handle_errors_give_the_full_path(checkpoints):
    handle = _handles(checkpoints)["changelog"]
    handle["base"]["stream"]["size"] = "big"
    with pytest.raises(CorruptStateError, match=r"field \$\.base\.stream\.size must be an integer"):
        StateHandle.from_json(handle)


@register_handle("test-unchecked")
@dataclass(frozen=True)
class _UncheckedHandle(KeyedStateHandle):
    """A plugin's handle that reads its fields without checking them."""

    key_group_range: KeyGroupRange
    size: int

    def _fields_json(self) -> dict[str, Any]:
        return {"key_group_range": self.key_group_range.to_json(), "size": self.size}

    @classmethod
    def _from_fields(cls, data: dict[str, Any]) -> "_UncheckedHandle":
        return cls(KeyGroupRange.from_json(data["key_group_range"]), int(data["size"]))


def test_a_plugin_handle_that_does_not_check_its_fields_still_gives_a_named_error():
    good = _UncheckedHandle(KeyGroupRange(0, 3), 7).to_json()
    assert StateHandle.from_json(good) == _UncheckedHandle(KeyGroupRange(0, 3), 7)
    with pytest.raises(CorruptStateError, match=r"field \$\.size is missing"):
        StateHandle.from_json({k: v for k, v in good.items() if k != "size"})
    with pytest.raises(CorruptStateError, match=r"field \$ \(a 'test-unchecked' state handle\) is malformed: "
                                                r"ValueError: .*'many'"):
        StateHandle.from_json({**good, "size": "many"})


def test_a_damaged_retained_checkpoint_says_how_the_job_goes_on_without_it(tmp_path):
    """A restart reads every retained checkpoint's _metadata, so a restore path cannot get past a
    damaged one: the error names its directory and says to move it out of the job's directory;
    done so, the job continues from its latest other checkpoint."""
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))

    def runner() -> LocalRunner:
        return LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                           storage=storage, job_id=JOB)

    rows = ROWS + [make_rows(24, 12, seed=3)]
    first = runner()
    for epoch_rows in rows:
        first.run_epoch(epoch_rows)
    job_dir = tmp_path / "checkpoints" / JOB
    (job_dir / "chk-1" / "_metadata").write_bytes(b"")  # e.g. a file system that lost its content
    with pytest.raises(CorruptStateError) as caught:
        runner()
    message = str(caught.value)
    assert f"move {(job_dir / 'chk-1').as_uri()} out of" in message, message
    (job_dir / "chk-1").rename(tmp_path / "damaged-chk-1")
    restarted = runner()
    restarted.run_epoch([])
    assert dump_state(restarted.latest_metadata(), restarted.streams, str(tmp_path / "dump")) == \
        expected_state(rows[0] + rows[1] + rows[2])
