"""Spark level: the backend selected by ``spark.statekit.*`` conf in a real local SparkSession.

Stateful jobs checkpoint across epochs, a task fails and is retried, the job restarts from its
checkpoint, rescales and switches backends through a savepoint; after every epoch the state in
the checkpoint is compared with the workload's failure-free oracle, every key and every value.

A plugin subclasses ``SparkTests`` (or single mixins) and overrides ``backend_settings``::

    class TestMyBackendOnSpark(SparkTests):
        @pytest.fixture
        def backend_settings(self):
            return {"backend": "mybackend", "backend.mybackend.some-option": "1"}

Override ``checkpoint_settings`` for another checkpoint storage (default: ``filesystem`` in the
test's temporary directory) and ``spark`` for another SparkSession (default: the session-scoped
``statekit_spark`` fixture of statekit's pytest plugin, ``local[2,3]``).
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from statekit.conformance_tests.base import requires
from statekit.conformance_tests.compare import assert_same_rows, assert_same_state
from statekit.conformance_tests.spark_session import statekit_conf
from statekit.conformance_tests.workload import (
    CLEAR, FailOnce, KeyState, Row, WorkloadFunction, WorkloadVectorFunction, dump_state, expected_outputs, expected_state,
    make_rows,
)
from statekit.checkpoint.store import CompletedCheckpoint
from statekit.runtime.function import ProcessFunction
from statekit.spark import StatekitConf, latest_checkpoint, process_keyed, process_keyed_stream, savepoint
from statekit.spark.session import is_connect
from statekit.spi import ConfigurationError, StateBackend
from statekit.spi.storage import CheckpointStreams

SCHEMA = "key string, category string, amount long"
OUTPUT = "key string, count long"
ROWS_PER_EPOCH = 1200
KEYS = 300


def epochs(count: int, seed: int) -> list[list[Row]]:
    return [make_rows(ROWS_PER_EPOCH, KEYS, seed + i) for i in range(count)]


class SparkJobs:
    """Runs workload epochs under Spark with the test's ``spark.statekit.*`` settings and checks
    every epoch's outputs and committed checkpoint against the oracle. Jobs are named per test:
    the ``jobmanager`` storage keeps every job's checkpoints in the driver for the whole session."""

    def __init__(self, spark: Any, configure: Callable[..., None], work: Path) -> None:
        self.spark = spark
        self.configure = configure  # configure({"dotted.name": value}, parallelism=4)
        self.work = work
        self._run = uuid.uuid4().hex[:8]

    def job_id(self, job: str) -> str:
        """The job id of this test's job ``job``."""
        return f"{job}-{self._run}"

    def backend(self) -> StateBackend:
        """The backend the current settings select."""
        return StatekitConf.from_spark(self.spark.conf).create_backend()

    def run_epoch(self, job: str, rows: list[Row], history: list[Row],
                  function: ProcessFunction | None = None) -> int:
        """Process ``rows`` as ``job``'s next epoch after ``history`` (extended in place), check
        its outputs and its checkpoint; return the checkpoint id."""
        df = self.spark.createDataFrame(rows, SCHEMA).coalesce(1)  # one partition: rows in oracle order
        out = process_keyed(df, "key", function or WorkloadFunction(), OUTPUT, job_id=self.job_id(job)).collect()
        assert_same_rows([(r["key"], r["count"]) for r in out], expected_outputs(rows, history),
                         f"outputs of job {job!r}")
        history.extend(rows)
        return self.check_checkpoint(job, history)

    def check_checkpoint(self, job: str, history: list[Row]) -> int:
        """Compare ``job``'s latest checkpoint with the oracle of ``history``; return its id."""
        checkpoint_id, found = self.checkpointed_state(job)
        assert_same_state(found, expected_state(history), f"checkpoint {checkpoint_id} of job {job!r}")
        return checkpoint_id

    def latest(self, job: str) -> tuple[CompletedCheckpoint, CheckpointStreams]:
        """``job``'s latest completed checkpoint and the streams that read it."""
        return latest_checkpoint(self.spark, self.job_id(job))

    def checkpointed_state(self, job: str) -> tuple[int, dict[str, KeyState]]:
        """The latest checkpoint's id and every key's state in it, read by the selected backend."""
        latest, streams = self.latest(job)
        found = dump_state(latest.metadata, streams, str(self.work / f"dump-{uuid.uuid4().hex[:8]}"),
                           state_backend=self.backend())
        return latest.checkpoint_id, found

    def savepoint(self, job: str) -> str:
        """A savepoint of ``job``'s latest checkpoint; returns its URL."""
        return savepoint(self.spark, self.job_id(job))

    def stream(self, job: str, batches: list[list[Row]], query_checkpoint: str) -> list[tuple[int, int]]:
        """Run a streaming query over ``batches`` (one JSON file each, one micro-batch each) until
        every file is processed; returns ``(micro-batch id, output rows)`` per micro-batch."""
        source = self.work / f"source-{job}"
        source.mkdir(exist_ok=True)
        for i, rows in enumerate(batches):
            path = source / f"part-{i:03d}.json"
            with open(path, "w") as f:
                f.writelines(json.dumps({"key": k, "category": c, "amount": a}) + "\n" for k, c, a in rows)
            os.utime(path, (1_700_000_000 + i,) * 2)  # the file source takes the oldest file first
        # the sink function records each micro-batch in a file: on a Spark Connect session it runs in a
        # Python process of the server (local: on this machine), not in this one
        record = self.work / f"micro-batches-{uuid.uuid4().hex[:8]}.jsonl"
        record.touch()

        def sink(out: Any, batch_id: int) -> None:
            with open(record, "a") as f:
                f.write(json.dumps([batch_id, out.count()]) + "\n")

        stream = self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        query = process_keyed_stream(stream, "key", WorkloadFunction(), OUTPUT, sink,
                                     checkpoint_location=query_checkpoint, job_id=self.job_id(job),
                                     trigger={"availableNow": True})
        query.awaitTermination(600)
        return [tuple(json.loads(line)) for line in record.read_text().splitlines()]


class SparkTestBase:
    """Base of the Spark-level mixins: override ``backend_settings``."""

    pytestmark = pytest.mark.statekit_spark

    @pytest.fixture
    def spark(self, statekit_spark: Any) -> Any:
        return statekit_spark

    @pytest.fixture
    def backend_settings(self) -> dict[str, str]:
        raise NotImplementedError("override the `backend_settings` fixture to return the spark.statekit.* "
                                  "settings (without the prefix) that select your backend, e.g. "
                                  "{'backend': 'mybackend'}")

    @pytest.fixture
    def checkpoint_settings(self, tmp_path: Path) -> dict[str, str]:
        """The checkpoint storage of every job: ``filesystem`` in the test's directory by default."""
        return {"checkpoint.storage": "filesystem", "checkpoint.dir": (tmp_path / "checkpoints").as_uri()}

    @pytest.fixture
    def spark_jobs(self, spark: Any, backend_settings: dict[str, str], checkpoint_settings: dict[str, str],
                   tmp_path: Path) -> Iterator[SparkJobs]:
        with statekit_conf(spark) as configure:
            configure({**backend_settings, **checkpoint_settings, "checkpoint.incremental": "true",
                       "max-parallelism": "128", "parallelism": "3", "local.dir": str(tmp_path / "local"),
                       "savepoint.dir": (tmp_path / "savepoints").as_uri()})
            yield SparkJobs(spark, configure, tmp_path)


class SparkCheckpointTests(SparkTestBase):
    @pytest.mark.parametrize("mode", ["full", "incremental", "native"])
    def test_every_epoch_commits_a_checkpoint_holding_the_oracle_state(self, spark_jobs, mode):
        """``native``: full checkpoints in the backend's own format (``spark.statekit.checkpoint.format``)."""
        if mode != "full":
            requires(spark_jobs.backend(), "incremental_snapshots" if mode == "incremental" else "native_snapshots")
        spark_jobs.configure({"checkpoint.incremental": str(mode == "incremental").lower(),
                              "checkpoint.format": "native" if mode == "native" else "canonical"})
        history: list[Row] = []
        ids = [spark_jobs.run_epoch(f"epochs-{mode}", rows, history) for rows in epochs(3, seed=100)]
        assert ids == [1, 2, 3], f"one checkpoint per epoch was expected, got checkpoint ids {ids}"

    def test_a_vector_function_holds_the_oracle_state(self, spark_jobs):
        """``KeyedVectorFunction``: bulk state of every kind and output columns, two epochs (the second
        restores what the first's bulk writes checkpointed)."""
        history: list[Row] = []
        for rows in epochs(2, seed=300):
            spark_jobs.run_epoch("vector", rows, history, WorkloadVectorFunction())


class SparkFailureTests(SparkTestBase):
    @pytest.mark.parametrize("after_rows", [50, None], ids=["mid-processing", "after-upload"])
    def test_a_failed_task_is_retried_and_the_state_matches_the_oracle(self, spark_jobs, tmp_path, after_rows):
        spark_jobs.configure(parallelism=2)
        first, second = epochs(2, seed=200)
        history: list[Row] = []
        spark_jobs.run_epoch("faults", first, history)
        marker = str(tmp_path / "failed-once")
        spark_jobs.run_epoch("faults", second, history, FailOnce(marker, after_rows))
        assert os.path.exists(marker), "the failure was not injected"


class SparkRestartTests(SparkTestBase):
    def test_a_restart_on_new_executors_restores_from_the_checkpoint(self, spark_jobs, tmp_path):
        batches = epochs(3, seed=300)
        history: list[Row] = []
        for rows in batches[:2]:
            spark_jobs.run_epoch("restart", rows, history)
        spark_jobs.configure({"local.dir": str(tmp_path / "new-executors")})  # no local state to reuse
        assert spark_jobs.run_epoch("restart", batches[2], history) == 3

    def test_a_restarted_stream_replays_a_micro_batch_exactly_once(self, spark_jobs, tmp_path):
        batches = epochs(3, seed=400)
        query_checkpoint = str(tmp_path / "query-checkpoint")
        if is_connect(spark_jobs.spark) and not StatekitConf.from_spark(spark_jobs.spark.conf).create_storage().durable:
            # a Connect server's Python process coordinates the micro-batches: memory the client cannot keep
            with pytest.raises(ConfigurationError, match="on a Spark Connect session"):
                spark_jobs.stream("stream", batches, query_checkpoint)
            return
        seen = spark_jobs.stream("stream", batches, query_checkpoint)
        assert seen == [(b, ROWS_PER_EPOCH) for b in range(3)], f"micro-batches and their output rows: {seen}"
        history = [row for rows in batches for row in rows]
        assert spark_jobs.check_checkpoint("stream", history) == 3
        for name in ("2", ".2.crc"):  # Spark has not recorded micro-batch 2 as committed: a restart replays it
            os.remove(os.path.join(query_checkpoint, "commits", name))
        replayed = spark_jobs.stream("stream", batches, query_checkpoint)
        assert replayed == [(2, ROWS_PER_EPOCH)], f"micro-batch 2 was not replayed alone: {replayed}"
        assert spark_jobs.check_checkpoint("stream", history) == 3, "the replay did not replace checkpoint 3"


class SparkLocalRecoveryTests(SparkTestBase):
    def test_keys_cleared_in_an_epoch_stay_cleared_in_the_next(self, spark_jobs):
        """Three epochs on the same executors, each reusing the working state the one before left
        (local recovery, or a worker's open backend): keys the second epoch clears stay cleared in
        the third, in its outputs and its checkpoint."""
        first, second, third = epochs(3, seed=700)
        cleared = sorted({key for key, _, _ in first})[::3]
        history: list[Row] = []
        spark_jobs.run_epoch("clears", first, history)
        spark_jobs.run_epoch("clears", second + [(key, CLEAR, 0) for key in cleared], history)
        spark_jobs.run_epoch("clears", third + [(key, "a", 1) for key in cleared[::2]], history)


class SparkRescaleTests(SparkTestBase):
    def test_rescaled_jobs_keep_every_key(self, spark_jobs):
        history: list[Row] = []
        for parallelism, rows in zip((4, 3, 8, 2), epochs(4, seed=500), strict=True):  # 4 -> 3 -> 8 -> 2
            spark_jobs.configure(parallelism=parallelism)
            spark_jobs.run_epoch("rescale", rows, history)
        latest, _ = spark_jobs.latest("rescale")
        assert latest.metadata.operator("keyed-process").parallelism == 2, "the last epoch did not run at 2"


class SparkSavepointTests(SparkTestBase):
    """A savepoint is backend-independent: the job moves to heap and back, rescaling on the way."""

    def _switch(self, spark_jobs: SparkJobs, source: dict[str, str], target: dict[str, str], name: str) -> None:
        first, second, third = epochs(3, seed=600)
        history: list[Row] = []
        spark_jobs.configure(source, parallelism=4)
        spark_jobs.run_epoch(f"{name}-source", first, history)
        spark_jobs.run_epoch(f"{name}-source", second, history)
        url = spark_jobs.savepoint(f"{name}-source")
        spark_jobs.configure(target, parallelism=3, **{"restore.path": url})
        assert spark_jobs.run_epoch(f"{name}-target", third, history) == 3, \
            "checkpoint ids continue after the restored savepoint's"

    def test_switch_to_heap_through_a_savepoint(self, spark_jobs, backend_settings):
        self._switch(spark_jobs, backend_settings, {"backend": "heap"}, "to-heap")

    def test_switch_from_heap_through_a_savepoint(self, spark_jobs, backend_settings):
        self._switch(spark_jobs, {"backend": "heap"}, backend_settings, "from-heap")


class SparkTests(SparkCheckpointTests, SparkFailureTests, SparkRestartTests, SparkLocalRecoveryTests,
                 SparkRescaleTests, SparkSavepointTests):
    """Every Spark-level mixin: subclass this one class and override ``backend_settings``."""


__all__ = ["SparkCheckpointTests", "SparkFailureTests", "SparkJobs", "SparkLocalRecoveryTests", "SparkRescaleTests", "SparkRestartTests",
           "SparkSavepointTests", "SparkTestBase", "SparkTests"]
