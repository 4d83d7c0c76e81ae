"""The ``statekit`` command line on real checkpoints written by the local runner."""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.cli import main
from statekit.inspection import StreamSummary
from statekit.conformance_tests.workload import (
    dump_state,
    WorkloadFunction, expected_key_state, make_rows, oracle,
)
from statekit.runtime.local_runner import LocalRunner
from statekit.spi.handles import FileStateHandle, InlineStateHandle
from statekit.spi.key_groups import KeyGroupRange
from statekit.storage.filesystem import FileSystemCheckpointStorage
from statekit.storage.pointers import resolve

from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.spi import SnapshotFormat

MAX_P = 128
OPERATOR = "keyed-process"
SRC = Path(__file__).resolve().parents[1] / "src"


# ---------------------------------------------------------------------------- fixtures


@dataclasses.dataclass
class Job:
    root: Path  # the checkpoint directory holding the job directory
    job_id: str
    rows: list[Any]
    parallelism: int

    @property
    def dir(self) -> Path:
        return self.root / self.job_id

    def chk(self, checkpoint_id: int) -> Path:
        return self.dir / f"chk-{checkpoint_id}"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli") / "checkpoints"


@pytest.fixture(scope="module")
def heap_job(root, tmp_path_factory) -> Job:
    """Three full heap checkpoints at parallelism 3 (keyed state in files, operator state inline),
    plus an incomplete ``chk-99``."""
    rows = [make_rows(600, 150, seed) for seed in range(3)]
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=3, max_parallelism=MAX_P,
                         storage=FileSystemCheckpointStorage(str(root), memory_threshold=2048), job_id="job-heap")
    for epoch_rows in rows:
        runner.run_epoch(epoch_rows)
    incomplete = root / "job-heap" / "chk-99"
    incomplete.mkdir()
    (incomplete / "somefile").write_bytes(b"half-written")
    return Job(root, "job-heap", [r for epoch_rows in rows for r in epoch_rows], 3)


@pytest.fixture(scope="module")
def rocks_job(root, tmp_path_factory) -> Job:
    """Three incremental RocksDB checkpoints at parallelism 2 sharing SST files under shared/."""
    rows = [make_rows(500, 120, 10 + seed) for seed in range(3)]
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                         state_backend=RocksDBStateBackend(), job_id="job-rocks", incremental=True,
                         storage=FileSystemCheckpointStorage(str(root), memory_threshold=0),
                         local_dir=str(tmp_path_factory.mktemp("rocks-local")))
    for epoch_rows in rows:
        runner.run_epoch(epoch_rows)
    return Job(root, "job-rocks", [r for epoch_rows in rows for r in epoch_rows], 2)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, *argv: str) -> Any:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


# ---------------------------------------------------------------------------- independent expectations


def _walk_streams(node: Any) -> list[dict[str, Any]]:
    """Every stream handle in raw metadata JSON (files and inline bytes), read without statekit."""
    found = []
    if isinstance(node, dict):
        if node.get("type") in ("file", "inline"):
            return [node]
        for value in node.values():
            found += _walk_streams(value)
    elif isinstance(node, list):
        for value in node:
            found += _walk_streams(value)
    return found


def _size(stream: dict[str, Any]) -> int:
    return stream["size"] if stream["type"] == "file" else len(base64.b64decode(stream["data"]))


def expected_sizes(metadata_file: Path) -> dict[str, Any]:
    """Total state size (each file once), file count, per-subtask sizes, computed from raw JSON
    (the document is the ``body`` of the metadata envelope)."""
    doc = json.loads(metadata_file.read_bytes())["body"]
    streams = _walk_streams(doc["operators"])
    files = {s["path"]: s["size"] for s in streams if s["type"] == "file"}
    inline = sum(_size(s) for s in streams if s["type"] == "inline")
    subtasks = [sum(_size(s) for s in _walk_streams(sub)) for op in doc["operators"] for sub in op["subtasks"]]
    return {"state_size": sum(files.values()) + inline, "files": len(files), "file_sizes": files,
            "subtasks": subtasks, "doc": doc}


def dump(metadata: CheckpointMetadata, streams, parallelism: int, tmp_path: Path) -> dict[str, Any]:
    return dump_state(metadata, streams, str(tmp_path), parallelism=parallelism, operator_id=OPERATOR)


def assert_restores_identically(savepoint_path: str, job: Job, parallelism: int, tmp_path: Path) -> None:
    """The savepoint restored into a new job at ``parallelism`` holds the oracle's state for every key."""
    resolved = resolve(savepoint_path)
    assert resolved.pointer.is_savepoint
    metadata = CheckpointMetadata.from_bytes(resolved.metadata)
    assert metadata.is_savepoint and metadata.properties["incremental"] is False
    assert parallelism != job.parallelism
    resumed = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=parallelism, max_parallelism=MAX_P,
                          job_id="resumed", storage=FileSystemCheckpointStorage(str(tmp_path / "resumed")))
    resumed.restore_from(metadata, resolved.streams)
    resumed.run_epoch([])
    want = {key: expected_key_state(s) for key, s in oracle(job.rows).items()}
    assert dump(resumed.latest_metadata(), resumed.streams, parallelism, tmp_path / "resumed-dump") == want
    # and the savepoint itself, read directly at the new parallelism
    assert dump(metadata, resolved.streams, parallelism, tmp_path / "savepoint-dump") == want


# ---------------------------------------------------------------------------- checkpoints list


def test_list_human_output(capsys, root, heap_job, rocks_job):
    code, out, err = run(capsys, "checkpoints", "list", str(root))
    assert code == 0, err
    assert "job job-heap" in out and "3 completed, 1 incomplete" in out
    assert "job job-rocks" in out and "3 completed" in out
    lines = out.splitlines()
    for job in (heap_job, rocks_job):
        block = lines[lines.index(next(line for line in lines if line.startswith(f"job {job.job_id} "))):]
        for checkpoint_id in (1, 2, 3):
            expected = expected_sizes(job.chk(checkpoint_id) / "_metadata")
            row = next(line.split() for line in block if line.split()[:1] == [str(checkpoint_id)])
            assert row[1] == "completed"
            assert str(expected["state_size"]) in row and str(expected["files"]) in row
            assert ("incremental" if job is rocks_job else "full") in row
            assert "checkpoint" in row
    incomplete = next(line.split() for line in lines if line.split()[:1] == ["99"])
    assert incomplete[1] == "incomplete"


def test_list_json_numbers(capsys, root, heap_job, rocks_job):
    doc = run_json(capsys, "checkpoints", "list", str(root))
    assert doc["path"] == Path(root).as_uri()
    assert [j["job_id"] for j in doc["jobs"]] == ["job-heap", "job-rocks"]
    assert doc["savepoints"] == []
    heap, rocks = doc["jobs"]
    assert [c["checkpoint_id"] for c in heap["checkpoints"]] == [1, 2, 3, 99]
    assert [c["checkpoint_id"] for c in rocks["checkpoints"]] == [1, 2, 3]
    for job, listed in ((heap_job, heap), (rocks_job, rocks)):
        for entry in listed["checkpoints"]:
            if entry["checkpoint_id"] == 99:
                continue
            expected = expected_sizes(job.chk(entry["checkpoint_id"]) / "_metadata")
            assert entry["status"] == "completed" and entry["error"] is None
            assert entry["state_size"] == expected["state_size"]
            assert entry["files"] == expected["files"]
            assert entry["incremental"] is (job is rocks_job)
            assert entry["savepoint"] is False
            assert entry["job_id"] == job.job_id
            assert entry["backend"] == ("rocksdb" if job is rocks_job else "heap")
            assert entry["timestamp"] == expected["doc"]["timestamp"]
            assert entry["time"].endswith("+00:00")
            assert entry["path"] == job.chk(entry["checkpoint_id"]).as_uri()
    assert heap["checkpoints"][-1] == {
        "name": "chk-99", "path": heap_job.chk(99).as_uri(), "checkpoint_id": 99, "status": "incomplete",
        "job_id": None, "timestamp": None, "time": None, "state_size": None, "files": None,
        "incremental": None, "savepoint": None, "backend": None, "error": None}


def test_incremental_sizes_count_shared_files_once(capsys, rocks_job):
    """chk-3 references SST files uploaded by earlier checkpoints; each counts once in its size."""
    first = set(expected_sizes(rocks_job.chk(1) / "_metadata")["file_sizes"])
    third = expected_sizes(rocks_job.chk(3) / "_metadata")
    reused = {p for p in third["file_sizes"] if p in first}
    assert reused and all(p.startswith("shared/") for p in reused), "incremental checkpoints share SST files"
    doc = run_json(capsys, "checkpoints", "describe", str(rocks_job.chk(3)))
    assert doc["state_size"] == third["state_size"]
    shared = {f["path"]: f["size"] for f in doc["shared_files"]["files"]}
    assert reused <= set(shared)
    assert doc["shared_files"]["count"] == len(shared) == sum(p.startswith("shared/") for p in third["file_sizes"])
    assert doc["shared_files"]["bytes"] == sum(shared.values())
    assert all(f["path"].startswith("chk-3/") for f in doc["exclusive_files"]["files"])
    for path, size in shared.items():  # the handles' sizes are the files' sizes on disk
        assert (rocks_job.dir / path).stat().st_size == size


def test_a_file_referenced_twice_counts_once():
    shared = FileStateHandle("shared/000001.sst-a", 100, "c1")
    summary = StreamSummary.of([shared, FileStateHandle("chk-2/MANIFEST-b", 10, "c2"), shared,
                                InlineStateHandle(b"abc"), InlineStateHandle(b"abc")])
    assert (summary.state_size, summary.files) == (116, 2)
    assert summary.shared == {"shared/000001.sst-a": 100} and summary.exclusive == {"chk-2/MANIFEST-b": 10}
    assert (summary.inline_count, summary.inline_bytes) == (2, 6)


def test_list_one_job_directory_and_json_flag_first(capsys, heap_job):
    doc = json.loads(_ok(capsys, "--json", "checkpoints", "list", str(heap_job.dir)))
    assert [j["job_id"] for j in doc["jobs"]] == ["job-heap"]
    assert [c["status"] for c in doc["jobs"][0]["checkpoints"]] == ["completed"] * 3 + ["incomplete"]


def test_list_empty_directory(capsys, tmp_path):
    code, out, _ = run(capsys, "checkpoints", "list", str(tmp_path))
    assert code == 0 and "no checkpoints" in out
    assert run_json(capsys, "checkpoints", "list", str(tmp_path)) == {
        "path": tmp_path.as_uri(), "jobs": [], "savepoints": []}


def test_list_reports_corrupt_metadata(capsys, tmp_path):
    (tmp_path / "job" / "chk-1").mkdir(parents=True)
    (tmp_path / "job" / "chk-1" / "_metadata").write_text("{not json")
    doc = run_json(capsys, "checkpoints", "list", str(tmp_path))
    entry = doc["jobs"][0]["checkpoints"][0]
    assert entry["status"] == "corrupt" and "not valid metadata JSON" in entry["error"]
    code, out, _ = run(capsys, "checkpoints", "list", str(tmp_path))
    assert code == 0 and "corrupt" in out and "not valid metadata JSON" in out


def test_memory_url(capsys):
    root = f"memory://statekit-cli-{uuid.uuid4().hex}/checkpoints"
    try:
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                             storage=FileSystemCheckpointStorage(root, memory_threshold=1024), job_id="mem-job")
        runner.run_epoch(make_rows(200, 50, 1))
        doc = run_json(capsys, "checkpoints", "list", root)
        assert [(c["checkpoint_id"], c["status"]) for c in doc["jobs"][0]["checkpoints"]] == [(1, "completed")]
        described = run_json(capsys, "checkpoints", "describe", f"{root}/mem-job")
        assert described["checkpoint_id"] == 1 and described["path"].startswith("memory://")
        assert described["path"].endswith(f"{root.split('://')[1]}/mem-job/chk-1")
        assert described["state_size"] == doc["jobs"][0]["checkpoints"][0]["state_size"] > 0
    finally:
        fs, path = fsspec.core.url_to_fs(root)
        fs.rm(path.rsplit("/", 1)[0], recursive=True)


def test_s3_url_with_storage_options(capsys, tmp_path):
    """s3:// through a moto server on 127.0.0.1; the endpoint is given with ``-o`` options."""
    s3 = pytest.importorskip("statekit.conformance_tests.s3")
    with s3.moto_s3_server(bucket="statekit-cli") as (endpoint_url, storage_options):
        root = "s3://statekit-cli/checkpoints"
        runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                             storage=FileSystemCheckpointStorage(root, memory_threshold=1024,
                                                                 storage_options=storage_options),
                             job_id="s3-job")
        rows = make_rows(300, 60, 5)
        runner.run_epoch(rows[:150])
        runner.run_epoch(rows[150:])
        fs, _ = fsspec.core.url_to_fs(root, **storage_options)
        fs.pipe_file("statekit-cli/checkpoints/s3-job/chk-99/somefile", b"half-written")
        options = [f"-o{key}={json.dumps(value) if isinstance(value, dict) else value}"
                   for key, value in storage_options.items()]
        doc = run_json(capsys, "checkpoints", "list", root, *options)
        (job,) = doc["jobs"]
        assert job["job_id"] == "s3-job"
        assert [(c["checkpoint_id"], c["status"]) for c in job["checkpoints"]] == [
            (1, "completed"), (2, "completed"), (99, "incomplete")]
        described = run_json(capsys, "checkpoints", "describe", f"{root}/s3-job", *options)
        assert described["checkpoint_id"] == 2 and described["path"] == f"{root}/s3-job/chk-2"
        assert described["state_size"] == job["checkpoints"][1]["state_size"] > 0
        created = run_json(capsys, "savepoint", "create", "--from", f"{root}/s3-job/chk-2",
                           "--to", "s3://statekit-cli/savepoints", *options)
        assert created["path"] == "s3://statekit-cli/savepoints/savepoint-s3-job-2"
        resolved = resolve(created["path"], storage_options)
        assert resolved.pointer.is_savepoint
        metadata = CheckpointMetadata.from_bytes(resolved.metadata)
        want = {key: expected_key_state(s) for key, s in oracle(rows).items()}
        assert dump(metadata, resolved.streams, 3, tmp_path) == want


# ---------------------------------------------------------------------------- checkpoints describe


def test_describe_human_output(capsys, heap_job):
    code, out, err = run(capsys, "checkpoints", "describe", str(heap_job.chk(2)))
    assert code == 0, err
    expected = expected_sizes(heap_job.chk(2) / "_metadata")
    assert out.startswith("checkpoint 2 of job job-heap\n")
    assert "checkpoint, full" in out and "backend:" in out and "heap" in out
    assert f"{expected['state_size']} B" in out
    assert "operator keyed-process: parallelism 3, max parallelism 128" in out
    assert "key serializer: MsgpackSerializer v3" in out
    for name, kind in (("count", "value"), ("last", "list"), ("sums", "map"), ("max", "reducing"),
                       ("mean", "aggregating")):
        assert any(line.split()[:2] == [name, kind] for line in out.splitlines()), name
    assert "value=Int64Serializer v1" in out and "user_key=StringSerializer v1" in out
    for name, mode in (("rows-seen", "split"), ("epochs", "union"), ("config", "broadcast")):
        assert any(line.split()[:2] == [name, mode] for line in out.splitlines()), name
    for index in range(3):
        kg = KeyGroupRange.of_subtask(MAX_P, 3, index)
        row = next(cells for cells in map(str.split, out.splitlines())
                   if cells[:2] == [str(index), f"{kg.start}-{kg.end}"])
        assert row[2] == str(expected["subtasks"][index])
    assert "shared files: 0" in out
    assert f"exclusive files: {expected['files']}" in out
    for path in expected["file_sizes"]:
        assert path.startswith("chk-2/") and path in out


def test_describe_json(capsys, heap_job):
    expected = expected_sizes(heap_job.chk(3) / "_metadata")
    for target in (heap_job.chk(3) / "_metadata", heap_job.chk(3), heap_job.dir):  # a job dir: its latest
        doc = run_json(capsys, "checkpoints", "describe", str(target))
        assert doc["checkpoint_id"] == 3 and doc["job_id"] == "job-heap"
        assert doc["path"] == heap_job.chk(3).as_uri()
    assert doc["savepoint"] is False and doc["incremental"] is False and doc["backend"] == "heap"
    assert doc["source_checkpoint"] is None
    assert doc["state_size"] == expected["state_size"] and doc["files"] == expected["files"]
    (op,) = doc["operators"]
    assert (op["operator_id"], op["parallelism"], op["max_parallelism"]) == (OPERATOR, 3, MAX_P)
    assert op["state_size"] == expected["state_size"]
    assert [s["name"] for s in op["states"]] == ["count", "last", "max", "mean", "sums"]
    sums = next(s for s in op["states"] if s["name"] == "sums")
    assert sums["kind"] == "map"
    assert {role: (s["class"], s["version"]) for role, s in sums["serializers"].items()} == {
        "namespace": ("MsgpackSerializer", 3), "user_key": ("StringSerializer", 1), "value": ("Int64Serializer", 1)}
    assert {s["name"]: s["mode"] for s in op["operator_states"]} == {
        "rows-seen": "split", "epochs": "union", "config": "broadcast"}
    assert [s["key_group_range"] for s in op["subtasks"]] == [
        KeyGroupRange.of_subtask(MAX_P, 3, i).to_json() for i in range(3)]
    assert [s["state_size"] for s in op["subtasks"]] == expected["subtasks"]
    assert all(s["state_size"] == s["keyed_state_size"] + s["operator_state_size"] for s in op["subtasks"])
    assert doc["shared_files"] == {"count": 0, "bytes": 0, "files": []}
    assert {f["path"]: f["size"] for f in doc["exclusive_files"]["files"]} == expected["file_sizes"]
    assert doc["exclusive_files"]["bytes"] + doc["inline"]["bytes"] == expected["state_size"]
    assert doc["inline"]["count"] == 3  # the operator state of each subtask is below the threshold


def test_describe_incremental_rocksdb(capsys, rocks_job):
    code, out, err = run(capsys, "checkpoints", "describe", str(rocks_job.chk(2)))
    assert code == 0, err
    assert "checkpoint, incremental" in out and "rocksdb" in out
    assert "shared files: " in out and "shared/" in out
    doc = run_json(capsys, "checkpoints", "describe", str(rocks_job.chk(2)))
    assert doc["incremental"] is True and doc["backend"] == "rocksdb"
    assert doc["state_size"] == expected_sizes(rocks_job.chk(2) / "_metadata")["state_size"]
    assert [s["key_group_range"] for s in doc["operators"][0]["subtasks"]] == [[0, 63], [64, 127]]


@pytest.mark.parametrize("backend", [RocksDBStateBackend, LMDBStateBackend])
def test_a_native_checkpoint_says_so_and_its_savepoint_is_canonical(capsys, tmp_path, backend):
    rows = make_rows(300, 60, 30)
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                         state_backend=backend(), job_id="job-native", checkpoint_format=SnapshotFormat.NATIVE,
                         storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints")),
                         local_dir=str(tmp_path / "local"))
    runner.run_epoch(rows)
    checkpoint = tmp_path / "checkpoints" / "job-native" / "chk-1"
    code, out, err = run(capsys, "checkpoints", "describe", str(checkpoint))
    assert code == 0 and "checkpoint, full, native format" in out, err
    code, out, err = run(capsys, "savepoint", "create", "--from", str(checkpoint), "--to", str(tmp_path / "sp"))
    assert code == 0, err
    doc = run_json(capsys, "checkpoints", "describe", str(tmp_path / "sp" / "savepoint-job-native-1"))
    assert doc["savepoint"] is True and doc["format"] == "canonical"


# ---------------------------------------------------------------------------- savepoint create


def test_savepoint_from_incremental_checkpoint_restores_at_another_parallelism(capsys, rocks_job, tmp_path):
    savepoints = tmp_path / "savepoints"
    code, out, err = run(capsys, "savepoint", "create", "--from", str(rocks_job.chk(3)), "--to", str(savepoints))
    assert code == 0, err
    target = savepoints / "savepoint-job-rocks-3"
    assert target.as_uri() in out and "checkpoint 3 of job job-rocks" in out and "rocksdb" in out
    assert (target / "_metadata").exists()
    doc = run_json(capsys, "checkpoints", "describe", str(target))
    assert doc["savepoint"] is True and doc["incremental"] is False and doc["source_checkpoint"] == 3
    assert doc["shared_files"]["count"] == 0  # self-contained
    assert_restores_identically(str(target), rocks_job, 3, tmp_path)


def test_savepoint_create_json_and_list(capsys, heap_job, tmp_path):
    savepoints = tmp_path / "savepoints"
    doc = run_json(capsys, "savepoint", "create", "--from", str(heap_job.dir), "--to", str(savepoints),
                   "--backend", "heap")
    target = savepoints / "savepoint-job-heap-3"
    assert doc["path"] == target.as_uri() and doc["job_id"] == "job-heap" and doc["checkpoint_id"] == 3
    assert doc["source"] == heap_job.chk(3).as_uri() and doc["backend"] == "heap"
    assert doc["state_size"] == expected_sizes(target / "_metadata")["state_size"]
    listed = run_json(capsys, "checkpoints", "list", str(savepoints))
    assert listed["jobs"] == []
    (entry,) = listed["savepoints"]
    assert (entry["name"], entry["status"], entry["savepoint"], entry["checkpoint_id"]) == (
        "savepoint-job-heap-3", "completed", True, 3)
    assert entry["state_size"] == doc["state_size"]
    assert_restores_identically(str(target), heap_job, 2, tmp_path)
    # never overwritten
    code, _, err = run(capsys, "savepoint", "create", "--from", str(heap_job.dir), "--to", str(savepoints))
    assert code == 2 and err.startswith("statekit: error:") and "already exists" in err


# ---------------------------------------------------------------------------- errors


def _ok(capsys, *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


@pytest.fixture
def corrupt_checkpoint(tmp_path) -> Path:
    directory = tmp_path / "corrupt-job" / "chk-1"
    directory.mkdir(parents=True)
    (directory / "_metadata").write_text('{"magic": "statekit-checkpoint", "version": 1, "checkpoint_id": 1}')
    return directory


@pytest.mark.parametrize("case", [
    "describe-missing", "describe-incomplete", "describe-corrupt", "describe-garbage", "list-missing",
    "create-unknown-backend", "create-not-a-backend", "create-from-incomplete", "create-from-corrupt",
    "create-wrong-backend", "usage", "state-get-wrong-job",
])
def test_errors_exit_2_with_one_line(capsys, case, heap_job, rocks_job, corrupt_checkpoint, tmp_path):
    garbage = tmp_path / "garbage" / "chk-5"
    garbage.mkdir(parents=True)
    (garbage / "_metadata").write_bytes(b"\x00\x01 not metadata")
    argv, fragment = {
        "describe-missing": (["checkpoints", "describe", str(tmp_path / "nope")], "does not exist"),
        "describe-incomplete": (["checkpoints", "describe", str(heap_job.chk(99))], "never completed"),
        "describe-corrupt": (["checkpoints", "describe", str(corrupt_checkpoint)], "corrupt"),
        "describe-garbage": (["checkpoints", "describe", str(garbage)], "not valid metadata JSON"),
        "list-missing": (["checkpoints", "list", str(tmp_path / "nope")], "does not exist"),
        "create-unknown-backend": (["savepoint", "create", "--from", str(heap_job.dir), "--to", str(tmp_path / "sp"),
                                    "--backend", "no-such-backend"], "no-such-backend"),
        "create-not-a-backend": (["savepoint", "create", "--from", str(heap_job.dir), "--to", str(tmp_path / "sp"),
                                  "--backend", "os:path"], "not a StateBackend"),
        "create-from-incomplete": (["savepoint", "create", "--from", str(heap_job.chk(99)), "--to",
                                    str(tmp_path / "sp")], "_metadata"),
        "create-from-corrupt": (["savepoint", "create", "--from", str(corrupt_checkpoint), "--to",
                                 str(tmp_path / "sp")], "corrupt"),
        "create-wrong-backend": (["savepoint", "create", "--from", str(rocks_job.dir), "--to", str(tmp_path / "sp"),
                                  "--backend", "heap"], "IncrementalRocksDBStateHandle"),
        "usage": (["savepoint", "create", "--from", str(heap_job.dir)], "--to"),
        # a job id that names nothing is not "a checkpoint without _metadata that never completed"
        "state-get-wrong-job": (["state", "get", str(heap_job.root / "no-such-job"), "--state", "count", "--key", "k"],
                                "no-such-job' does not exist: give a _metadata file"),
    }[case]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("statekit: error:") and fragment in last
    if case != "usage":
        assert len(err.strip().splitlines()) == 1
    if case.startswith("create"):
        assert not (tmp_path / "sp").exists() or not any((tmp_path / "sp").iterdir()), "nothing half-written"


def test_help(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "checkpoints" in out and "savepoint" in out
    code, out, _ = run(capsys, "savepoint", "create", "--help")
    assert code == 0 and "--backend" in out


# ---------------------------------------------------------------------------- the real entry point


def test_console_entry_point(heap_job, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "statekit.cli", "checkpoints", "list", str(heap_job.root)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "job job-heap" in done.stdout and "incomplete" in done.stdout
    ids = [line.split()[0] for line in done.stdout.splitlines() if line.split()[1:2] in (["completed"], ["incomplete"])]
    assert ids[:4] == ["1", "2", "3", "99"]
    failed = subprocess.run([sys.executable, "-m", "statekit.cli", "checkpoints", "describe", str(tmp_path / "nope")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert failed.returncode == 2
    assert failed.stderr.startswith("statekit: error:") and "Traceback" not in failed.stderr


def test_a_backend_module_that_fails_on_import_is_one_error_line(capsys, monkeypatch, heap_job, tmp_path):
    """--backend module:Class whose module raises on import (a plugin's bug, not an ImportError)."""
    (tmp_path / "plugin_that_raises.py").write_text("raise RuntimeError('the plugin is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = run(capsys, "savepoint", "create", "--from", str(heap_job.dir), "--to", str(tmp_path / "sp"),
                         "--backend", "plugin_that_raises:Backend")
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert "'plugin_that_raises:Backend' cannot be loaded: RuntimeError: the plugin is broken" in err, err
