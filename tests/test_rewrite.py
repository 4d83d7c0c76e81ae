"""Offline state rewrites: renamed, dropped and transformed states in a new savepoint that a job
restores from."""
from __future__ import annotations

import dataclasses

import pytest

from statekit.registry import backend_class
from statekit.runtime.function import CheckpointedFunction, KeyedProcessFunction
from statekit.runtime.local_runner import LocalRunner
from statekit.runtime.rewrite import KeyedStateTransform, StateRewrite, rewrite_savepoint
from statekit.spi import ConfigurationError, ListStateDescriptor, ValueStateDescriptor
from statekit.storage.filesystem import FileSystemCheckpointStorage


@dataclasses.dataclass
class Visits:
    count: int
    pages: list[str]


class Clicks(KeyedProcessFunction):
    """Version 1: a count, the pages, and a state nobody needs any more."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", type=int))
        self.pages = ctx.get_state(ListStateDescriptor("pages", type=str))
        self.legacy = ctx.get_state(ValueStateDescriptor("legacy"))

    def process(self, row, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.pages.add(row["page"])
        self.legacy.update("x")
        return ()


class Merged(KeyedProcessFunction):
    """Version 2: one record holding both, and the renamed state."""

    def open(self, ctx):
        self.visits = ctx.get_state(ValueStateDescriptor("visits", type=Visits))
        self.renamed = ctx.get_state(ValueStateDescriptor("was-legacy"))

    def process(self, row, ctx):
        visits = self.visits.value()
        yield ctx.current_key, visits.count, visits.pages, self.renamed.value()


class MergeIntoRecord(KeyedStateTransform):
    reads = ("count", "pages")

    def open(self, old, new):
        self.count = old.get_state(ValueStateDescriptor("count", type=int))
        self.pages = old.get_state(ListStateDescriptor("pages", type=str))
        self.visits = new.get_state(ValueStateDescriptor("visits", type=Visits))

    def transform(self, key, old, new):
        self.visits.update(Visits(self.count.value() or 0, list(self.pages.get())))


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_a_rewritten_savepoint_restores_with_renamed_dropped_and_merged_state(backend, tmp_path):
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    job = LocalRunner(Clicks(), lambda row: row["user"], parallelism=2, storage=storage, job_id="clicks",
                      state_backend=backend_class(backend)(), local_dir=str(tmp_path / "local"))
    job.run_epoch([{"user": u, "page": p} for u, p in [("ann", "/"), ("bob", "/a"), ("ann", "/b")]])
    savepoint = job.savepoint(str(tmp_path / "savepoints"))
    source = storage.resolve_checkpoint(str(tmp_path / "savepoints" / "savepoint-clicks-1"))
    target = storage.savepoint_location(str(tmp_path / "savepoints"), "clicks-v2")
    rewrite = StateRewrite(rename={"legacy": "was-legacy"}, transform=MergeIntoRecord())
    rewritten, _ = rewrite_savepoint(target, savepoint, source.streams, rewrite)
    assert sorted(rewritten.operator("keyed-process").states()) == ["visits", "was-legacy"]
    v2 = LocalRunner(Merged(), lambda row: row["user"], parallelism=3, state_backend=backend_class(backend)(),
                     local_dir=str(tmp_path / "v2"))
    v2.restore_from(rewritten, source.streams)
    assert sorted(v2.run_epoch([{"user": "ann"}, {"user": "bob"}])) == [
        ("ann", 2, ["/", "/b"], "x"), ("bob", 1, ["/a"], "x")]


def test_a_rewrite_naming_what_is_not_there_is_refused(tmp_path):
    with pytest.raises(ConfigurationError, match=r"names states \['nope'\]"):
        StateRewrite(drop=frozenset({"nope"})).check({})


def _savepoint(tmp_path, backend="heap"):
    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"))
    job = LocalRunner(Clicks(), lambda row: row["user"], parallelism=2, storage=storage, job_id="clicks",
                      state_backend=backend_class(backend)(), local_dir=str(tmp_path / "local"))
    job.run_epoch([{"user": u, "page": p} for u, p in [("ann", "/"), ("bob", "/a"), ("ann", "/b")]])
    job.savepoint(str(tmp_path / "savepoints"))
    return str(tmp_path / "savepoints" / "savepoint-clicks-1")


def test_the_cli_renames_and_drops_without_reading_a_value(tmp_path, capsys):
    import json

    from statekit.cli import main as cli
    from statekit.storage.pointers import resolve

    source = _savepoint(tmp_path)
    assert cli(["savepoint", "rewrite", "--from", source, "--to", str(tmp_path / "savepoints"), "--id", "v2",
                "--rename", "legacy=was-legacy", "--rename", "count=clicks", "--drop", "pages", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["renamed"] == {"legacy": "was-legacy", "count": "clicks"} and doc["dropped"] == ["pages"]
    resolved = resolve(doc["path"])
    from statekit.checkpoint.metadata import read_metadata

    states = read_metadata(resolved.metadata, resolved.pointer).operator("keyed-process").states()
    assert sorted(states) == ["clicks", "was-legacy"]
    assert cli(["savepoint", "rewrite", "--from", source, "--to", str(tmp_path / "savepoints"), "--id", "v3",
                "--rename", "nope=x"]) == 2
    assert "names states ['nope']" in capsys.readouterr().err


@pytest.mark.spark
def test_a_spark_rewrite_runs_a_task_per_subtask(spark, statekit_settings, tmp_path):
    import sys

    from pyspark import cloudpickle

    from statekit.spark import rewrite_savepoint as spark_rewrite
    from statekit.storage.pointers import resolve
    from statekit.checkpoint.metadata import read_metadata

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    statekit_settings({"checkpoint.storage": "filesystem", "checkpoint.dir": (tmp_path / "checkpoints").as_uri(),
                       "local.dir": str(tmp_path / "spark-local")})
    source = _savepoint(tmp_path, "rocksdb")
    url = spark_rewrite(spark, source, StateRewrite(drop=frozenset({"legacy"}), transform=MergeIntoRecord()), "v2",
                        savepoint_dir=str(tmp_path / "savepoints"))
    resolved = resolve(url)
    rewritten = read_metadata(resolved.metadata, resolved.pointer)
    v2 = LocalRunner(Merged(), lambda row: row["user"], parallelism=1, state_backend=backend_class("lmdb")(),
                     local_dir=str(tmp_path / "v2"))
    v2.restore_from(rewritten, resolved.streams)
    assert sorted(v2.run_epoch([{"user": "ann"}, {"user": "bob"}])) == [
        ("ann", 2, ["/", "/b"], None), ("bob", 1, ["/a"], None)]


class NumberedClicks(Clicks, CheckpointedFunction):
    """Clicks, and the rows each subtask has seen as operator state."""

    def initialize_state(self, ctx):
        self.seen = ctx.operator_state.get_list_state("rows-seen")
        self.rows = sum(self.seen.get()) if ctx.is_restored else 0

    def snapshot_state(self, ctx):
        self.seen.update([self.rows])

    def process(self, row, ctx):
        self.rows += 1
        yield from super().process(row, ctx)
        yield ctx.current_key, self.rows


def test_a_rewritten_savepoint_holds_its_own_copy_of_the_operator_state(tmp_path):
    """The new savepoint needs no file of the old one: operator state in files is copied, so the
    old savepoint may be deleted."""
    import shutil

    from statekit.storage.pointers import resolve

    storage = FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), **{"memory-threshold": "0"})
    job = LocalRunner(NumberedClicks(), lambda row: row["user"], parallelism=1, storage=storage, job_id="clicks")
    job.run_epoch([{"user": "ann", "page": "/"}, {"user": "bob", "page": "/a"}])
    source = job.savepoint(str(tmp_path / "savepoints"))
    streams = resolve(str(tmp_path / "savepoints" / "savepoint-clicks-1")).streams
    target = storage.savepoint_location(str(tmp_path / "moved"), "v2")
    rewritten, pointer = rewrite_savepoint(target, source, streams, StateRewrite(drop=frozenset({"legacy"})))
    assert rewritten.operator("keyed-process").subtasks[0].operator is not None
    shutil.rmtree(tmp_path / "savepoints")
    resolved = resolve(pointer.external_pointer)
    again = LocalRunner(NumberedClicks(), lambda row: row["user"], parallelism=1, job_id="again")
    again.restore_from(rewritten, resolved.streams)
    assert ("cid", 3) in again.run_epoch([{"user": "cid", "page": "/"}])
