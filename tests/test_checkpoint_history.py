"""``statekit checkpoints history`` and ``statekit state skew`` (text, JSON and --plot) on real
checkpoints written by the local runner, on local disk and on S3 (moto)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from statekit import KeyedProcessFunction, ListStateDescriptor
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.conformance_tests.s3 import DEFAULT_BUCKET, moto_s3  # noqa: F401 - a session-scoped fixture
from statekit.conformance_tests.workload import WorkloadFunction, make_rows
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.metrics import HISTORY_LENGTH
from statekit.spi import SnapshotFormat
from statekit.spi.key_groups import key_group_for_key
from statekit.storage.filesystem import FileSystemCheckpointStorage
from test_cli import run, run_json

MAX_P = 128
PNG = b"\x89PNG\r\n\x1a\n"


def rescaled_incremental_job(root: str, storage_options: dict[str, Any] | None = None) -> None:
    """Six incremental RocksDB epochs, rescaled 2 -> 4 before the fourth; two checkpoints retained."""
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, max_parallelism=MAX_P,
                         state_backend=RocksDBStateBackend(), incremental=True, num_retained=2, job_id="history",
                         storage=FileSystemCheckpointStorage(root, memory_threshold=256,
                                                             storage_options=storage_options or {}))
    for epoch in range(6):
        if epoch == 3:
            runner.rescale(4)
        runner.run_epoch(make_rows(300, 80, epoch))


def _check_history(capsys, root: str, options: list[str], tmp_path) -> None:
    doc = run_json(capsys, "checkpoints", "history", root, "--job", "history", *options)
    rows = doc["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == [1, 2, 3, 4, 5, 6], "beyond the two retained checkpoints"
    assert [r["parallelism"] for r in rows] == [2, 2, 2, 4, 4, 4]
    assert [r["rows_in"] for r in rows] == [300] * 6
    assert rows[1]["kind"] == "incremental" and rows[1]["bytes_reused"] > 0, "epoch 2 reuses epoch 1's SST files"
    assert rows[0]["restore_sources"] == {"fresh": 2} and rows[3]["restore_sources"] == {"storage": 4}
    assert all(r["state_size"] > 0 and r["duration_ms"] is not None and r["time"] for r in rows)
    assert all(r["state_entries"] > 0 and r["live_state_bytes"] > 0 and r["timers_pending"] == 0 for r in rows)
    assert not rows[0]["state_entries_exact"], "RocksDB estimates its keys"
    assert run_json(capsys, "checkpoints", "history", root, "--job", "history", "--last", "2",
                    *options)["checkpoints"] == rows[-2:]
    code, out, err = run(capsys, "checkpoints", "history", root, "--job", "history", *options)
    assert code == 0, err
    assert "rescale 2->4" in out and "incremental" in out and "storage x4" in out
    assert f"~{rows[-1]['state_entries']}, ~{rows[-1]['live_state_bytes']}" in out
    plot = tmp_path / "history.png"
    assert run(capsys, "checkpoints", "history", root, "--job", "history", "--plot", str(plot), *options)[0] == 0
    assert plot.read_bytes().startswith(PNG)


def test_history_table_json_and_plot_on_local_disk(capsys, tmp_path):
    root = (tmp_path / "checkpoints").as_uri()
    rescaled_incremental_job(root)
    _check_history(capsys, root, [], tmp_path)
    code, _, err = run(capsys, "checkpoints", "history", root, "--job", "nope")
    assert code == 2 and "no job 'nope'" in err and "history" in err


def test_history_and_skew_on_s3(capsys, tmp_path, moto_s3):  # noqa: F811 - the fixture
    root = f"s3://{DEFAULT_BUCKET}/history-cli"
    rescaled_incremental_job(root, moto_s3.storage_options)
    options = [f"-o{key}={json.dumps(value) if isinstance(value, dict) else value}"
               for key, value in moto_s3.storage_options.items()]
    _check_history(capsys, root, options, tmp_path)
    doc = run_json(capsys, "state", "skew", f"{root}/history", *options)
    assert doc["checkpoint_id"] == 6 and not doc["exact"], "RocksDB's incremental files are spread: an estimate"
    assert len(doc["key_groups"]) == MAX_P and doc["total_bytes"] > 0


def test_the_history_is_bounded_and_a_job_dir_is_enough(capsys, tmp_path):
    root = (tmp_path / "checkpoints").as_uri()
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=1, max_parallelism=MAX_P, job_id="long",
                         storage=FileSystemCheckpointStorage(root))
    for epoch in range(HISTORY_LENGTH + 3):
        runner.run_epoch(make_rows(2, 2, epoch))
    rows = run_json(capsys, "checkpoints", "history", f"{root}/long", "--last", "1000")["checkpoints"]
    assert [r["checkpoint_id"] for r in rows] == list(range(3, HISTORY_LENGTH + 4))


def hot_key_function() -> KeyedProcessFunction:
    class Appends(KeyedProcessFunction):
        def open(self, ctx):
            self.items = ctx.get_state(ListStateDescriptor("items"))

        def process(self, row, ctx):
            self.items.add(row["payload"])

    return Appends()


def skewed_job(root: str, native_rocksdb: bool = False) -> None:
    """One epoch of a job whose key ``hot`` holds most of the state (heap, canonical; or RocksDB, native)."""
    state_backend = RocksDBStateBackend() if native_rocksdb else None
    runner = LocalRunner(hot_key_function(), lambda row: row["key"], parallelism=2, max_parallelism=MAX_P,
                         job_id="skewed", state_backend=state_backend, key_types=["string"],
                         checkpoint_format=SnapshotFormat.NATIVE if native_rocksdb else SnapshotFormat.CANONICAL,
                         storage=FileSystemCheckpointStorage(root))
    rows = [{"key": "hot", "payload": "x" * 200} for _ in range(2000)]
    rows += [{"key": f"cold-{i}", "payload": "y"} for i in range(500)]
    runner.run_epoch(rows)


@pytest.mark.parametrize("backend,exact", [("heap", True), ("rocksdb-native", False)])
def test_skew_names_a_skewed_jobs_hot_key_group(capsys, tmp_path, backend, exact):
    root = (tmp_path / "checkpoints").as_uri()
    skewed_job(root, native_rocksdb=backend == "rocksdb-native")
    hot = key_group_for_key("hot", MAX_P, ["string"])
    doc = run_json(capsys, "state", "skew", f"{root}/skewed", "--top", "3")
    assert doc["exact"] is exact
    if exact:
        assert doc["hottest"][0]["key_group"] == hot and doc["hottest"][0]["share"] > 0.5
    else:  # spread over the subtask's key groups: the hot key group's subtask is the hot one
        assert doc["hottest"][0]["subtask"] == doc["key_groups"][hot]["subtask"]
    code, out, err = run(capsys, "state", "skew", f"{root}/skewed", "--plot", str(tmp_path / "skew.png"))
    assert code == 0, err
    assert (tmp_path / "skew.png").read_bytes().startswith(PNG)
    assert "hottest key groups" in out and ("estimated" in out) is not exact
    if exact:
        assert out.split("hottest key groups:")[1].splitlines()[2].split()[0] == str(hot)
