"""A catalogue of bad inputs: settings, backend and storage options, job and operator ids,
function results, file-system failures. Each must fail with a statekit error of the right type
whose message names the setting, argument or file, and the fix (the accepted form, or what to do);
none may write anything it should not. Spark-free: ``StatekitConf`` parses settings exactly as
``spark.statekit.*`` conf is parsed."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pytest

from statekit import KeyedBatchFunction, KeyedProcessFunction, KeyedVectorFunction, ValueStateDescriptor
from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.inspection import create_savepoint
from statekit.runtime import LocalRunner
from statekit.spark.conf import StatekitConf
from statekit.spark.state_source import ReadOptions
from statekit.spi.errors import (
    ConfigurationError, FunctionResultError, RestoreError, SerializationError, SnapshotError, StatekitError,
)
from statekit.storage.filesystem import FileSystemCheckpointStorage
from statekit.storage.pointers import resolve
from statekit.storage.memory import JobManagerCheckpointStorage


@dataclass(frozen=True)
class Bad:
    """``action(tmp_path)`` must raise ``error`` with every string of ``names`` in its message."""

    id: str
    action: Callable[[Path], Any]
    error: type[StatekitError]
    names: tuple[str, ...]


def conf(settings: dict[str, Any]) -> Callable[[Path], Any]:
    """Parse ``spark.statekit.*`` settings (named without the prefix; a callable value gets the
    test's directory)."""
    return lambda tmp: StatekitConf.parse({k: v(tmp) if callable(v) else v for k, v in settings.items()})


def under_a_file(tmp: Path) -> str:
    (tmp / "a-file").write_text("not a directory")
    return str(tmp / "a-file" / "state")


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process(self, row, ctx):
        self.count.update(self.count.value() + 1)
        yield ctx.current_key, self.count.value()


class StoresText(KeyedProcessFunction):
    """Stores a string in a state whose serializer takes 64-bit integers."""

    def open(self, ctx):
        from statekit.serializers import Int64Serializer
        self.count = ctx.get_state(ValueStateDescriptor("count", Int64Serializer()))

    def process(self, row, ctx):
        self.count.update("oops")


def heap(**options: Any) -> Any:
    from statekit.backends.heap import HeapStateBackend
    return HeapStateBackend(**options)


class Returns(KeyedProcessFunction):
    """``process`` returns ``value`` (a wrong result)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def process(self, row, ctx):
        return self.value


class VectorReturns(KeyedVectorFunction):
    def __init__(self, value: Any) -> None:
        self.value = value

    def process_groups(self, groups, ctx):
        return self.value


def a_pandas_frame() -> Any:
    import pandas
    return pandas.DataFrame({"user": ["ann"], "count": [1]})


class BatchReturns(KeyedBatchFunction):
    def __init__(self, value: Any) -> None:
        self.value = value

    def process_rows(self, key, rows, ctx):
        return self.value


def run(function: Any, records: list[Any] | None = None, **runner: Any) -> Callable[[Path], Any]:
    def action(tmp: Path) -> Any:
        local = LocalRunner(function, key_selector=lambda r: r["user"] if isinstance(r, dict) else r, **runner)
        return local.run_epoch(records if records is not None else ["ann", "bob"])
    return action


def runner_on_disk(job_id: str = "job", operator_id: str = "keyed-process") -> Callable[[Path], Any]:
    return lambda tmp: LocalRunner(Count(), key_selector=lambda r: r, job_id=job_id, operator_id=operator_id,
                                   storage=FileSystemCheckpointStorage(str(tmp / "checkpoints")))


def upload_to_s3_with_the_connection_refused(tmp: Path) -> Any:
    """A checkpoint file's PUT to an S3 endpoint that refuses the connection (a closed port on
    loopback: botocore's EndpointConnectionError once s3fs and botocore gave up retrying)."""
    import socket

    from statekit.storage.filesystem import FileSystemStorageAccess
    from statekit.storage.urls import open_url
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fs, root = open_url("s3://bucket/checkpoints", storage_options={
        "key": "testing", "secret": "testing", "config_kwargs": {"retries": {"max_attempts": 1}},
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"}})
    fs.retries = 1  # s3fs's own retries
    stream = FileSystemStorageAccess(fs, root, "job", memory_threshold=16).streams(1, "0").create_output()
    stream.write(b"state" * 100)
    return stream.close_and_get_handle()


def epoch_into_a_blocked_directory(blocked: str) -> Callable[[Path], Any]:
    """A checkpoint directory that cannot be written any more after checkpoint 1 (a regular file
    where the directory of checkpoint 2 or the shared directory goes; permissions do not stop root)."""
    def action(tmp: Path) -> Any:
        storage = FileSystemCheckpointStorage(str(tmp / "checkpoints"), memory_threshold=0)
        local = LocalRunner(Count(), key_selector=lambda r: r, job_id="job", storage=storage)
        local.run_epoch(["ann", "bob"])
        target = tmp / "checkpoints" / "job" / blocked
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("blocks the directory")
        try:
            local.run_epoch(["ann"])
        finally:
            assert [c.checkpoint_id for c in local.store.completed()] == [1], "checkpoint 1 was lost"
    return action


def savepoint_of_a_checkpoint_naming_job(job_id: str) -> Callable[[Path], Any]:
    """``statekit savepoint create`` of a savepoint whose metadata carries ``job_id`` (the new
    savepoint directory is named after it). A savepoint directory's job id is not its place's (it
    is relocatable); a checkpoint directory's must be its job directory's name (``read_metadata``)."""
    def action(tmp: Path) -> Any:
        source = tmp / "moved" / "savepoint-1"
        source.mkdir(parents=True)
        (source / "_metadata").write_bytes(CheckpointMetadata(1, job_id, {}, is_savepoint=True).to_bytes())
        try:
            return create_savepoint(str(source), str(tmp / "savepoints" / "here"))
        finally:
            assert not (tmp / "savepoints").exists(), "something was written"
    return action


JOB_ID_RULES = "letters, digits"

CASES = [
    # --- spark.statekit.* settings
    Bad("backend-unknown", conf({"backend": "nosuch"}), ConfigurationError,
        ("spark.statekit.backend='nosuch'", "accepted: heap")),
    Bad("storage-unknown", conf({"checkpoint.storage": "nosuch"}), ConfigurationError,
        ("spark.statekit.checkpoint.storage='nosuch'", "accepted:")),
    Bad("filesystem-without-dir", conf({"checkpoint.storage": "filesystem"}), ConfigurationError,
        ("spark.statekit.checkpoint.dir", "file:///data/checkpoints")),
    Bad("dir-with-jobmanager", conf({"checkpoint.dir": "/tmp/chk"}), ConfigurationError,
        ("spark.statekit.checkpoint.dir='/tmp/chk'", "driver memory", "checkpoint.storage=filesystem")),
    Bad("incremental-maybe", conf({"checkpoint.incremental": "maybe"}), ConfigurationError,
        ("spark.statekit.checkpoint.incremental", "true or false")),
    Bad("num-retained-zero", conf({"checkpoint.num-retained": "0"}), ConfigurationError,
        ("spark.statekit.checkpoint.num-retained", "whole number from 1")),
    Bad("num-retained-text", conf({"checkpoint.num-retained": "three"}), ConfigurationError,
        ("spark.statekit.checkpoint.num-retained", "whole number")),
    Bad("parallelism-zero", conf({"parallelism": "0"}), ConfigurationError,
        ("spark.statekit.parallelism", "whole number from 1 to 32768")),
    Bad("parallelism-fraction", conf({"parallelism": "1.5"}), ConfigurationError, ("spark.statekit.parallelism",
                                                                               "whole number")),
    Bad("max-parallelism-over-32768-alone", conf({"max-parallelism": "40000"}), ConfigurationError,
        ("spark.statekit.max-parallelism", "from 1 to 32768")),
    Bad("max-parallelism-negative", conf({"max-parallelism": "-4"}), ConfigurationError,
        ("spark.statekit.max-parallelism", "from 1 to 32768")),
    Bad("parallelism-over-max", conf({"parallelism": "200", "max-parallelism": "128"}), ConfigurationError,
        ("parallelism 200 exceeds max parallelism 128", "raise max parallelism or lower parallelism")),
    Bad("restore-mode", conf({"restore.mode": "steal"}), ConfigurationError,
        ("spark.statekit.restore.mode", "one of no-claim, claim")),
    Bad("batch-bytes-inf", conf({"batch.max-bytes": "inf"}), ConfigurationError,
        ("spark.statekit.batch.max-bytes", "written like 4096, 64m or 1g")),
    Bad("batch-bytes-nan", conf({"batch.max-bytes": "nan"}), ConfigurationError, ("spark.statekit.batch.max-bytes",
                                                                              "64m")),
    Bad("batch-bytes-negative", conf({"batch.max-bytes": "-1"}), ConfigurationError,
        ("spark.statekit.batch.max-bytes", "from 1 to 2g")),
    Bad("batch-bytes-absurd", conf({"batch.max-bytes": "5t"}), ConfigurationError, ("spark.statekit.batch.max-bytes",
                                                                                "from 1 to 2g")),
    Bad("batch-bytes-overflow", conf({"batch.max-bytes": "1e400g"}), ConfigurationError,
        ("spark.statekit.batch.max-bytes", "64m")),
    Bad("local-dir-under-a-file", conf({"local.dir": under_a_file}), ConfigurationError,
        ("spark.statekit.local.dir", "is a file", "choose a directory")),
    Bad("local-dir-url", conf({"local.dir": "s3://bucket/state"}), ConfigurationError,
        ("spark.statekit.local.dir", "local directory path")),
    Bad("job-id-escapes", conf({"job-id": "../escape"}), ConfigurationError,
        ("spark.statekit.job-id='../escape'", "not a valid job id", JOB_ID_RULES)),
    Bad("take-over-perhaps", conf({"job.take-over": "perhaps"}), ConfigurationError,
        ("spark.statekit.job.take-over", "true or false")),
    Bad("setting-typo", conf({"chekpoint.dir": "/tmp"}), ConfigurationError,
        ("unknown setting spark.statekit.chekpoint.dir", "known: spark.statekit.backend")),
    Bad("other-storages-option", conf({"checkpoint.filesystem.memory-threshold": "1k"}), ConfigurationError,
        ("spark.statekit.checkpoint.filesystem.memory-threshold", "checkpoint.storage=jobmanager",
         "remove it or select that storage")),
    # --- storage options (spark.statekit.checkpoint.<storage>.*)
    Bad("jobmanager-size-text", conf({"checkpoint.jobmanager.max-state-size": "lots"}), ConfigurationError,
        ("spark.statekit.checkpoint.jobmanager.max-state-size", "written like 4096, 64m or 1g")),
    Bad("jobmanager-size-zero", conf({"checkpoint.jobmanager.max-state-size": "0"}), ConfigurationError,
        ("spark.statekit.checkpoint.jobmanager.max-state-size", "from 1")),
    Bad("jobmanager-unknown-option", conf({"checkpoint.jobmanager.max-size": "1m"}), ConfigurationError,
        ("spark.statekit.checkpoint.jobmanager.max-size", "did you mean spark.statekit.checkpoint.jobmanager.max-"
                                                          "state-size")),
    Bad("memory-threshold-negative", conf({"checkpoint.storage": "filesystem", "checkpoint.dir": "/tmp/c",
                                                "checkpoint.filesystem.memory-threshold": "-1"}), ConfigurationError,
        ("spark.statekit.checkpoint.filesystem.memory-threshold", "from 0 to 1g")),
    Bad("memory-threshold-absurd", conf({"checkpoint.storage": "filesystem", "checkpoint.dir": "/tmp/c",
                                              "checkpoint.filesystem.memory-threshold": "4g"}), ConfigurationError,
        ("spark.statekit.checkpoint.filesystem.memory-threshold", "from 0 to 1g")),
    Bad("filesystem-unknown-option", conf({"checkpoint.storage": "filesystem", "checkpoint.dir": "/tmp/c",
                                                "checkpoint.filesystem.threshold": "1k"}), ConfigurationError,
        ("unknown setting spark.statekit.checkpoint.filesystem.threshold",
         "known: spark.statekit.checkpoint.filesystem.memory-threshold")),
    Bad("option-given-twice", lambda tmp: FileSystemCheckpointStorage(str(tmp), **{"memory_threshold": 1,
                                                                                   "memory-threshold": 2}),
        ConfigurationError, ("spark.statekit.checkpoint.filesystem.memory-threshold is given twice", "give it once")),
    # --- backend options (spark.statekit.backend.<name>.*)
    Bad("heap-chain-length-zero", conf({"backend.heap.changelog.max-chain-length": "0"}), ConfigurationError,
        ("spark.statekit.backend.heap.changelog.max-chain-length", "whole number from 1")),
    Bad("heap-chain-ratio-inf", conf({"backend.heap.changelog.max-chain-bytes-ratio": "inf"}),
        ConfigurationError, ("spark.statekit.backend.heap.changelog.max-chain-bytes-ratio", "finite number")),
    Bad("heap-chain-ratio-negative", conf({"backend.heap.changelog.max-chain-bytes-ratio": "-2"}),
        ConfigurationError, ("spark.statekit.backend.heap.changelog.max-chain-bytes-ratio", "above 0")),
    Bad("heap-unknown-option", conf({"backend.heap.cache-size": "1m"}), ConfigurationError,
        ("unknown setting spark.statekit.backend.heap.cache-size", "known: spark.statekit.backend.heap.changelog")),
    Bad("rocksdb-compression", conf({"backend": "rocksdb", "backend.rocksdb.compression": "brotli"}),
        ConfigurationError, ("spark.statekit.backend.rocksdb.compression", "one of none, snappy, lz4, zstd")),
    Bad("rocksdb-cache-inf", conf({"backend": "rocksdb", "backend.rocksdb.block-cache-size": "inf"}),
        ConfigurationError, ("spark.statekit.backend.rocksdb.block-cache-size", "64m")),
    Bad("rocksdb-write-buffers-zero", conf({"backend": "rocksdb", "backend.rocksdb.max-write-buffer-number": "0"}),
        ConfigurationError, ("spark.statekit.backend.rocksdb.max-write-buffer-number", "whole number from 1")),
    Bad("rocksdb-local-dir-under-a-file", conf({"backend": "rocksdb", "backend.rocksdb.local-dir": under_a_file}),
        ConfigurationError, ("spark.statekit.backend.rocksdb.local-dir", "is a file")),
    Bad("lmdb-map-size-tiny", conf({"backend": "lmdb", "backend.lmdb.map-size": "1k"}), ConfigurationError,
        ("spark.statekit.backend.lmdb.map-size", "from 64k")),
    Bad("lmdb-max-dbs-huge", conf({"backend": "lmdb", "backend.lmdb.max-dbs": "40000"}), ConfigurationError,
        ("spark.statekit.backend.lmdb.max-dbs", "from 1 to 32767")),
    Bad("lmdb-sync-sometimes", conf({"backend": "lmdb", "backend.lmdb.sync": "sometimes"}), ConfigurationError,
        ("spark.statekit.backend.lmdb.sync", "true or false")),
    # --- job ids and operator ids: refused before anything is written
    Bad("job-id-parent", runner_on_disk("../escape"), ConfigurationError, ("job_id='../escape'", "'..'",
                                                                           JOB_ID_RULES)),
    Bad("job-id-nested", runner_on_disk("a/b"), ConfigurationError, ("job_id='a/b'", "path separator")),
    Bad("job-id-empty", runner_on_disk(""), ConfigurationError, ("job_id=''", "empty", JOB_ID_RULES)),
    Bad("job-id-checkpoint-name", runner_on_disk("chk-7"), ConfigurationError, ("job_id='chk-7'", "reserves")),
    Bad("job-id-shared", runner_on_disk("shared"), ConfigurationError, ("job_id='shared'", "reserves")),
    Bad("job-id-shared-other-case", runner_on_disk("Shared"), ConfigurationError, ("job_id='Shared'", "reserves")),
    Bad("job-id-savepoint-name", runner_on_disk("savepoint-1"), ConfigurationError, ("job_id='savepoint-1'",
                                                                                     "reserves")),
    Bad("job-id-too-long", runner_on_disk("j" * 200), ConfigurationError, ("200 characters long", JOB_ID_RULES)),
    Bad("job-id-space", runner_on_disk("my job"), ConfigurationError, ("job_id='my job'", JOB_ID_RULES)),
    Bad("operator-id-nested", runner_on_disk(operator_id="op/1"), ConfigurationError,
        ("operator_id='op/1'", "path separator", "e.g. 'keyed-process'")),
    Bad("storage-create-access-escape", lambda tmp: FileSystemCheckpointStorage(str(tmp / "c")).create_access(".."),
        ConfigurationError, ("job_id='..'", JOB_ID_RULES)),
    Bad("jobmanager-create-access-nested", lambda tmp: JobManagerCheckpointStorage().create_access("a/b"),
        ConfigurationError, ("job_id='a/b'", "path separator")),
    Bad("cli-savepoint-of-an-escaping-job-id", savepoint_of_a_checkpoint_naming_job("../escaped"),
        ConfigurationError, ("the job id in", "_metadata='../escaped'", "not a valid job id")),
    # --- what the function is and what it returns
    Bad("process-returns-int", run(Returns(42)), FunctionResultError,
        ("Returns.process returned int 42 for key '", "`return [row]` or `yield row`")),
    Bad("process-returns-str", run(Returns("ann,1")), FunctionResultError,
        ("Returns.process returned str 'ann,1'", "single value", "yield row")),
    Bad("process-returns-bytes", run(Returns(b"row")), FunctionResultError, ("returned bytes", "yield row")),
    Bad("process-returns-dict", run(Returns({"user": "ann", "count": 1})), FunctionResultError,
        ("returned dict", "single value", "`return [row]`")),
    # a pandas DataFrame iterates its column names: they were taken as the output rows, silently
    Bad("process-returns-a-pandas-frame", run(Returns(a_pandas_frame())), FunctionResultError,
        ("Returns.process returned DataFrame", "iterates its column names", "itertuples(index=False, name=None)")),
    Bad("process-groups-returns-a-pandas-frame", run(VectorReturns(a_pandas_frame()), [{"user": "ann"}]),
        FunctionResultError, ("VectorReturns.process_groups returned DataFrame", "pyarrow.Table.from_pandas")),
    Bad("process-rows-returns-a-batch", run(BatchReturns(pa.RecordBatch.from_pydict({"n": [1]})),
                                            [{"user": "ann"}, {"user": "bob"}]),
        FunctionResultError, ("BatchReturns.process_rows returned RecordBatch", "batch.to_pylist()")),
    # a value its state's serializer does not take: the snapshot names the state, the key and the value
    Bad("int64-state-holds-a-string", run(StoresText(), ["ann"]), SerializationError,
        ("state 'count': the value of key 'ann' cannot be snapshotted", "Int64Serializer cannot encode 'oops' (str)",
         "it takes 64-bit integers, from -9223372036854775808", "PickleSerializer")),
    Bad("int64-state-holds-a-string-incremental", run(StoresText(), ["ann"], state_backend=heap(), incremental=True),
        SerializationError, ("state 'count': the value of key 'ann'", "Int64Serializer cannot encode 'oops' (str)")),
    Bad("function-is-a-lambda", lambda tmp: LocalRunner(lambda row: row, key_selector=lambda r: r),
        ConfigurationError, ("KeyedProcessFunction, KeyedBatchFunction, KeyedVectorFunction", "process_groups")),
    Bad("function-is-a-class", lambda tmp: LocalRunner(Count, key_selector=lambda r: r), ConfigurationError,
        ("pass an instance",)),
    Bad("key-selector-not-callable", lambda tmp: LocalRunner(Count(), key_selector="user"), ConfigurationError,
        ("key_selector", "a function from a record to its key")),
    # --- storage errors: name the path and the setting; nothing committed is lost
    Bad("checkpoint-dir-is-a-file", lambda tmp: FileSystemCheckpointStorage(under_a_file(tmp)).create_access("job"),
        ConfigurationError, ("spark.statekit.checkpoint.dir=", "not writable", "choose a directory")),
    Bad("checkpoint-dir-unwritable-mid-run", epoch_into_a_blocked_directory("chk-2"), SnapshotError,
        ("chk-2", "spark.statekit.checkpoint.dir", "may write there")),
    Bad("change-feed-backwards", lambda tmp: ReadOptions.parse({"path": str(tmp), "changes-from": "2",
                                                                "changes-to": "1"}),
        ConfigurationError, ("changes-from=2 must be an earlier checkpoint than changes-to=1",)),
    Bad("s3-connection-refused-on-a-data-put", upload_to_s3_with_the_connection_refused, SnapshotError,
        ("cannot write checkpoint file bucket/checkpoints/job/chk-1/", "EndpointConnectionError",
         "spark.statekit.checkpoint.dir", "endpoint is reachable")),
    Bad("restore-path-missing", lambda tmp: resolve(str(tmp / "nothing" / "chk-3")), RestoreError,
        ("spark.statekit.restore.path=", "nothing/chk-3' does not exist")),
]


def test_the_catalogue_holds_at_least_40_distinct_bad_inputs():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_fails_naming_the_cause_and_the_fix(case: Bad, tmp_path: Path):
    with pytest.raises(case.error) as caught:
        case.action(tmp_path)
    message = str(caught.value)
    for name in case.names:
        assert name in message, f"{name!r} is not in the message: {message}"


@pytest.mark.parametrize("job_id", ["../escape", "a/b", "", "chk-7", "shared"])
def test_a_refused_job_id_writes_nothing(tmp_path, job_id):
    with pytest.raises(ConfigurationError):
        runner_on_disk(job_id)(tmp_path)
    assert not os.listdir(tmp_path), f"something was written: {os.listdir(tmp_path)}"
