"""Progress bars of long operations: drawn on a terminal (or with STATEKIT_PROGRESS=1), advanced
by the bytes converted; nothing when stderr is no terminal or rich is not installed."""
from __future__ import annotations

import contextlib
import io
import sys

from statekit import progress as progress_module
from statekit.cli import main
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


def test_a_savepoint_advances_its_bar_by_every_byte_of_the_checkpoint(tmp_path, monkeypatch):
    root = _job(tmp_path)
    bars: list[tuple[str, float, list[float]]] = []

    @contextlib.contextmanager
    def recording(description, total, unit="bytes"):
        bars.append((description, total, []))
        yield bars[-1][2].append

    monkeypatch.setattr(savepoints, "progress", recording)
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
