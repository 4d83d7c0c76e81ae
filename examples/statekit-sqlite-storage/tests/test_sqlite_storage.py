"""What the conformance suite does not cover: options, pointers, and the storage under Spark conf."""
import pytest

from statekit.runtime import LocalRunner
from statekit.spark.conf import StatekitConf
from statekit.spi import ConfigurationError, RestoreError
from statekit.spi.storage import StateScope
from statekit_sqlite_storage import SQLiteCheckpointStorage, SQLiteStreamHandle


def test_spark_conf_selects_the_storage_by_name(tmp_path):
    conf = StatekitConf.parse({"checkpoint.storage": "sqlite", "checkpoint.sqlite.path": str(tmp_path / "c.db"),
                               "checkpoint.sqlite.memory-threshold": "1k"})
    storage = conf.create_storage()
    assert isinstance(storage, SQLiteCheckpointStorage)
    assert storage.memory_threshold == 1024


@pytest.mark.parametrize("settings, message", [
    ({}, "needs spark.statekit.checkpoint.sqlite.path"),
    ({"checkpoint.sqlite.path": "x.db", "checkpoint.sqlite.busy-timeout": "-1"},
     "spark.statekit.checkpoint.sqlite.busy-timeout"),
    ({"checkpoint.sqlite.path": "x.db", "checkpoint.sqlite.pathh": "y"},
     "did you mean spark.statekit.checkpoint.sqlite.path"),
    ({"checkpoint.sqlite.path": "x.db", "checkpoint.dir": "file:///tmp/c"}, "takes no directory"),
])
def test_bad_settings_fail_before_a_job_runs(settings, message):
    with pytest.raises(ConfigurationError, match=message):
        StatekitConf.parse({"checkpoint.storage": "sqlite", **settings})


def test_a_pointer_resolves_in_another_process_view_of_the_file(tmp_path):
    storage = SQLiteCheckpointStorage(path=str(tmp_path / "c.db"))
    access = storage.create_access("job")
    out = access.streams(1, "op-0").create_output(StateScope.SHARED, "keyed")
    out.write(b"x" * 50_000)
    handle = out.close_and_get_handle()
    assert isinstance(handle, SQLiteStreamHandle) and access.is_shared(handle)
    pointer = access.commit(1, b"metadata")
    assert pointer.external_pointer.startswith("sqlite:") and pointer.external_pointer.endswith("#job/chk-1")
    resolved = SQLiteCheckpointStorage(path=str(tmp_path / "other.db")).resolve_checkpoint(pointer.external_pointer)
    assert resolved.metadata == b"metadata"
    assert resolved.streams.read(handle) == b"x" * 50_000
    for wrong in (pointer.external_pointer.replace("chk-1", "chk-2"), "sqlite:/no/such.db#job/chk-1",
                  "sqlite:garbage"):
        with pytest.raises(RestoreError, match="restore.path"):
            storage.resolve_checkpoint(wrong)


def test_a_local_job_checkpoints_restores_and_takes_a_savepoint(tmp_path):
    from statekit.conformance_tests.workload import WorkloadFunction, make_rows

    storage = SQLiteCheckpointStorage(path=str(tmp_path / "c.db"), **{"memory-threshold": "1k"})
    first = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=2, storage=storage, job_id="job")
    rows = make_rows(2000, 300, seed=1)
    expected = first.run_epoch(rows)
    first.savepoint(str(tmp_path / "savepoints"))
    again = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=3, storage=storage, job_id="job")
    oracle = LocalRunner(WorkloadFunction(), lambda row: row[0], parallelism=1, job_id="oracle")
    oracle.run_epoch(rows)
    more = make_rows(500, 300, seed=2)
    assert sorted(map(repr, again.run_epoch(more))) == sorted(map(repr, oracle.run_epoch(more)))
    assert expected
    assert list(tmp_path.joinpath("savepoints").iterdir()), "no savepoint directory was written"
