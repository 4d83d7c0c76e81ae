"""Progress bars of long operations: drawn on a terminal (or with STATEKIT_PROGRESS=1), advanced
by the bytes converted; nothing when stderr is no terminal or rich is not installed."""
from __future__ import annotations

import contextlib
import io
import sys

import pytest

from statekit import progress as progress_module
from statekit.cli import main
from statekit.registry import backend_class
from statekit.runtime import task as task_module
from statekit.conformance_tests.workload import WorkloadFunction, make_rows
from statekit.runtime import savepoints
from statekit.runtime.local_runner import LocalRunner
from statekit.storage.filesystem import FileSystemCheckpointStorage


def _job(tmp_path) -> str:
    root = (tmp_path / "checkpoints").as_uri()
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=3, job_id="bar",
                         storage=FileSystemCheckpointStorage(root))
    runner.run_epoch(make_rows(500, 100, 1))
    return root


def test_no_bar_when_stderr_is_not_a_terminal(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv(progress_module.ENVIRONMENT, raising=False)
    root = _job(tmp_path)
    assert main(["savepoint", "create", "--from", f"{root}/bar", "--to", (tmp_path / "sp").as_uri()]) == 0
    assert capsys.readouterr().err == ""


def _recording_bars(monkeypatch, module) -> list[tuple[str, float, list[float]]]:
    """Every bar ``module`` draws from now on: (description, total, advances)."""
    bars: list[tuple[str, float, list[float]]] = []

    @contextlib.contextmanager
    def recording(description, total, unit="bytes"):
        bars.append((description, total, []))
        yield bars[-1][2].append

    monkeypatch.setattr(module, "progress", recording)
    return bars


def _restore_bars(monkeypatch) -> list[tuple[str, float, list[float]]]:
    """Every restore's bar from now on, whatever its size."""
    monkeypatch.setattr(task_module, "LARGE_RESTORE_BYTES", 0)
    return _recording_bars(monkeypatch, task_module)


def test_a_savepoint_advances_its_bar_by_every_byte_of_the_checkpoint(tmp_path, monkeypatch):
    root = _job(tmp_path)
    bars = _recording_bars(monkeypatch, savepoints)
    assert main(["savepoint", "create", "--from", f"{root}/bar", "--to", (tmp_path / "sp").as_uri(), "--json"]) == 0
    ((description, total, advanced),) = bars
    assert description == "savepoint of checkpoint 1" and total > 0
    assert len(advanced) == 3 and sum(advanced) == total


def test_a_forced_bar_draws_with_rich_and_none_without_it(monkeypatch):
    monkeypatch.setenv(progress_module.ENVIRONMENT, "1")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress_module.progress("copying", 100) as advance:
        assert advance is not progress_module._ignore
        advance(100)
    monkeypatch.setitem(sys.modules, "rich.progress", None)  # as if rich were not installed
    with progress_module.progress("copying", 100) as advance:
        assert advance is progress_module._ignore
    monkeypatch.setenv(progress_module.ENVIRONMENT, "0")
    monkeypatch.delitem(sys.modules, "rich.progress")
    with progress_module.progress("copying", 100) as advance:
        assert advance is progress_module._ignore


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_restore_advances_its_bar_by_every_byte_it_reads(tmp_path, monkeypatch, backend):
    """The second epoch restores each subtask from the first's checkpoint (RocksDB: its SST files)."""
    root = (tmp_path / "checkpoints").as_uri()
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=3, job_id="bar",
                         state_backend=backend_class(backend)(), incremental=backend == "rocksdb",
                         storage=FileSystemCheckpointStorage(root))
    runner.run_epoch(make_rows(500, 100, 1))
    bars = _restore_bars(monkeypatch)
    runner.run_epoch(make_rows(500, 100, 2))
    restored = runner.store.latest_before(2).metadata.operator(runner.operator_id).subtasks
    operator_state = sum(s.operator.state_size for s in restored if s.operator)  # every subtask reads all of it
    assert [(d, t) for d, t, _ in bars] == [
        (f"restoring keyed-process-{i} from checkpoint 1", sum(h.state_size for h in s.keyed) + operator_state)
        for i, s in enumerate(restored)]
    assert all(sum(advanced) == total for _, total, advanced in bars), bars


def test_state_get_of_an_incremental_checkpoint_shows_the_restore_of_its_subtask(tmp_path, monkeypatch, capsys):
    root = (tmp_path / "checkpoints").as_uri()
    runner = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, job_id="bar",
                         state_backend=backend_class("rocksdb")(), incremental=True,
                         storage=FileSystemCheckpointStorage(root))
    runner.run_epoch(make_rows(500, 100, 1))
    bars = _restore_bars(monkeypatch)
    assert main(["state", "get", f"{root}/bar", "--state", "count", "--key", "key-7"]) == 0
    assert capsys.readouterr().out.strip().isdigit()
    ((description, total, advanced),) = bars
    assert description.startswith("restoring keyed-process-") and total > 0 and sum(advanced) == total


def test_a_bar_inside_another_draws_nothing(tmp_path, monkeypatch):
    """A savepoint conversion's restores of large state, under its own bar: rich draws one at a time."""
    root = _job(tmp_path)
    monkeypatch.setenv(progress_module.ENVIRONMENT, "1")
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    monkeypatch.setattr(task_module, "LARGE_RESTORE_BYTES", 0)
    assert main(["savepoint", "create", "--from", f"{root}/bar", "--to", (tmp_path / "sp").as_uri()]) == 0
    with progress_module.progress("outer", 10) as outer, progress_module.progress("inner", 10) as inner:
        assert outer is not progress_module._ignore and inner is progress_module._ignore
