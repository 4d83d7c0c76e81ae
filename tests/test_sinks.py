"""Transactional sinks in a shared Spark session (``local[2,3]``: a failed task is retried), and
the sinks' own contracts without Spark.

Under Spark: each sink's output equals the failure-free output (Parquet on local disk and on S3
through the moto server, PostgreSQL, SQLite through the write-ahead log); a task that fails after
pre-committing leaves a lingering transaction that is aborted; a commit that fails transiently is
retried; one that fails permanently stops the query with nothing lost, and the restarted query
commits it; a PostgreSQL transaction the server timed out fails its task, whose retry writes the
rows once; a transaction rolled back behind the job's back is a clear error, or skipped when the
job is told to ignore it; a discarding sink drops the output and the job keeps its state. The
kills of whole drivers are in ``test_sink_exactly_once``.
"""
import contextlib
import os
import shutil
import socket
import sqlite3
import sys
import time
from collections import Counter

import psycopg
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark import TaskContext, cloudpickle

from statekit.conformance_tests.s3 import DEFAULT_BUCKET, moto_s3  # noqa: F401 - a session-scoped fixture
from statekit.conformance_tests.workload import WorkloadFunction, expected_outputs, make_rows
from statekit.runtime.sink_coordinator import SINK_PROPERTY
from statekit.sinks import DiscardingSink, ParquetFileSink, PostgresSink, SqliteWriteAheadSink
from statekit.sinks.files import STAGING_DIR
from statekit.sinks.sqlite import PUBLISHED_TABLE
from statekit.spark import process_keyed_stream
from statekit.spi.errors import ConfigurationError, SinkError, TransactionLostError
from statekit.spi.sinks import SinkContext
from statekit.storage.pointers import resolve
from statekit.checkpoint.metadata import CheckpointMetadata

from fsync_recorder import record_syncs
from killable import write_micro_batches

pytestmark = [pytest.mark.spark]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the sinks and functions below run on executors
SCHEMA = "key string, category string, amount long"
OUTPUT = "key string, count long"


@pytest.fixture
def pg_table(postgres, request):
    table = f"out_{request.node.name.lower().replace('[', '_').replace(']', '').replace('-', '_')}"[:60]
    with psycopg.connect(postgres.conninfo, autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(f"CREATE TABLE {table} (key text, count bigint)")
    return table


def _pg_rows(postgres, table):
    with psycopg.connect(postgres.conninfo) as connection:
        return Counter(connection.execute(f"SELECT key, count FROM {table}").fetchall())


def _prepared(postgres):
    with psycopg.connect(postgres.conninfo) as connection:
        return [gid for gid, in connection.execute("SELECT gid FROM pg_prepared_xacts").fetchall()]


class Job:
    """A streaming job over JSON files, one per micro-batch, with the failure-free output."""

    def __init__(self, spark, statekit_settings, work, batches=2, backend="heap"):
        self.spark, self.work = spark, work
        self.epochs = [make_rows(200, 40, seed) for seed in range(5, 5 + batches)]
        write_micro_batches(work, self.epochs)
        statekit_settings({"backend": backend, "checkpoint.storage": "filesystem",
                           "checkpoint.dir": (work / "checkpoints").as_uri(), "parallelism": 2,
                           "local.dir": str(work / "local")})

    def run(self, sink, function=None):
        stream = self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(self.work / "source"))
        query = process_keyed_stream(stream, "key", function or WorkloadFunction(), OUTPUT, sink,
                                     checkpoint_location=str(self.work / "spark-checkpoint"), job_id="sinks",
                                     trigger={"availableNow": True})
        query.awaitTermination()

    def expected(self):
        return Counter(r for i, e in enumerate(self.epochs)
                       for r in expected_outputs(e, [x for y in self.epochs[:i] for x in y]))

    def checkpoint(self):
        return CheckpointMetadata.from_bytes(resolve((self.work / "checkpoints" / "sinks").as_uri()).metadata)


def _parquet_rows(path, filesystem=None):
    table = ds.dataset(path, format="parquet", filesystem=filesystem).to_table()
    return Counter(zip(table.column("key").to_pylist(), table.column("count").to_pylist()))


def test_parquet_sink_on_local_disk(spark, statekit_settings, tmp_path):
    job = Job(spark, statekit_settings, tmp_path, backend="rocksdb")
    job.run(ParquetFileSink((tmp_path / "out").as_uri()))
    assert _parquet_rows(str(tmp_path / "out")) == job.expected()
    assert Counter(tuple(r) for r in spark.read.parquet(str(tmp_path / "out")).collect()) == job.expected()
    assert sorted(os.listdir(tmp_path / "out")) == [STAGING_DIR] + [
        f"sinks~keyed-process~e{e:010d}~s{s:05d}.parquet" for e in (1, 2) for s in (0, 1)]
    recorded = job.checkpoint().properties[SINK_PROPERTY]
    assert recorded["kind"] == "two-phase-commit" and [o["subtask"] for o in recorded["outputs"]] == [0, 1]
    assert sum(o["rows"] for o in recorded["outputs"]) == len(job.epochs[1])


def test_a_discarding_sink_drops_the_output_and_the_job_keeps_its_state(spark, statekit_settings, tmp_path):
    job = Job(spark, statekit_settings, tmp_path)
    job.run(DiscardingSink())
    recorded = job.checkpoint().properties[SINK_PROPERTY]
    assert [o["subtask"] for o in recorded["outputs"]] == [0, 1]
    assert sum(o["rows"] for o in recorded["outputs"]) == len(job.epochs[1]), "the rows it dropped"
    counts = (spark.read.format("statekit").option("state", "count")
              .load((tmp_path / "checkpoints" / "sinks").as_uri()))
    assert {r.key: r.value for r in counts.collect()} == Counter(key for e in job.epochs for key, _, _ in e)


class FailingAfterPreCommit(ParquetFileSink):
    """Subtask 0's first attempt fails right after its transaction was pre-committed."""

    def pre_commit(self, transaction):
        record = super().pre_commit(transaction)
        if transaction.context.subtask == 0 and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("task dies after pre-commit")
        return record


def test_parquet_sink_on_s3(spark, statekit_settings, tmp_path, moto_s3):  # noqa: F811 - the fixture
    """Another job stages its files in the same directory, and a failed attempt leaves one: the
    driver lists ``_staging`` between epochs, and its S3 client must not answer from that cached
    listing whether a file the executors staged since exists (it would call the transaction lost)."""
    endpoint_url, storage_options = moto_s3
    job = Job(spark, statekit_settings, tmp_path, batches=3, backend="lmdb")
    sink = FailingAfterPreCommit(f"s3://{DEFAULT_BUCKET}/sink-output", storage_options=storage_options)
    fs, root = sink._fs()
    foreign = f"{root}/{STAGING_DIR}/statekit~another-job~keyed-process~1~0~run~0.parquet"
    fs.pipe(foreign, b"staged by another job")
    job.run(sink)
    fs.invalidate_cache()
    assert _parquet_rows(f"{DEFAULT_BUCKET}/sink-output", filesystem=fs) == job.expected()
    assert fs.ls(f"{root}/{STAGING_DIR}") == [foreign]  # only the other job's file is left


def test_a_retried_task_leaves_no_lingering_transaction(spark, statekit_settings, tmp_path):
    job = Job(spark, statekit_settings, tmp_path)
    job.run(FailingAfterPreCommit((tmp_path / "out").as_uri()))
    assert _parquet_rows(str(tmp_path / "out")) == job.expected()
    assert os.listdir(tmp_path / "out" / STAGING_DIR) == []  # the failed attempts' staged files were aborted


class PostgresFailingAfterPrepare(PostgresSink):
    def pre_commit(self, transaction):
        record = super().pre_commit(transaction)
        if transaction.context.subtask == 1 and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("task dies after PREPARE TRANSACTION")
        return record


def test_postgres_sink_two_phase_commit(spark, statekit_settings, tmp_path, postgres, pg_table):
    job = Job(spark, statekit_settings, tmp_path, backend="lmdb")
    job.run(PostgresFailingAfterPrepare(postgres.conninfo, pg_table))
    assert _pg_rows(postgres, pg_table) == job.expected()
    assert _prepared(postgres) == []  # the failed attempts' prepared transactions were rolled back


class SlowFunction(WorkloadFunction):
    """Stalls the first attempt of each task longer than the server lets a transaction idle."""

    def open(self, ctx):
        super().open(ctx)
        if TaskContext.get().attemptNumber() == 0 and ctx.checkpoint_id == 2:
            time.sleep(1.5)


def test_a_transaction_the_server_timed_out_is_written_again(spark, statekit_settings, tmp_path, postgres, pg_table):
    job = Job(spark, statekit_settings, tmp_path)
    job.run(PostgresSink(postgres.conninfo, pg_table, idle_in_transaction_timeout_ms=500), SlowFunction())
    assert _pg_rows(postgres, pg_table) == job.expected()
    assert _prepared(postgres) == []


class FlakyCommit(ParquetFileSink):
    """Every commit fails ``failures`` times first (counted in a file: commits run on the driver)."""

    def __init__(self, path, counter, failures, error):
        super().__init__(path)
        self.counter, self.failures, self.error = counter, failures, error

    def commit(self, record):
        calls = int(self.counter.read_text()) if self.counter.exists() else 0
        self.counter.write_text(str(calls + 1))
        if calls < self.failures:
            raise self.error
        super().commit(record)


def test_a_transient_commit_failure_is_retried(spark, statekit_settings, tmp_path):
    job = Job(spark, statekit_settings, tmp_path)
    job.run(FlakyCommit((tmp_path / "out").as_uri(), tmp_path / "calls", 2, ConnectionError("connection reset")))
    assert _parquet_rows(str(tmp_path / "out")) == job.expected()
    assert int((tmp_path / "calls").read_text()) == 2 + 4  # 2 failed tries, then 2 subtasks x 2 epochs


def test_a_permanent_commit_failure_stops_the_query_and_loses_nothing(spark, statekit_settings, tmp_path):
    job = Job(spark, statekit_settings, tmp_path)
    with pytest.raises(Exception, match="Nothing is lost: the completed checkpoint records this output"):
        job.run(FlakyCommit((tmp_path / "out").as_uri(), tmp_path / "calls", 1, ValueError("bucket policy denies")))
    assert list((tmp_path / "out").glob("*.parquet")) == []  # epoch 1 is staged, not committed
    job.run(ParquetFileSink((tmp_path / "out").as_uri()))  # the cause is fixed: the restart commits epoch 1
    assert _parquet_rows(str(tmp_path / "out")) == job.expected()


class LosingTransactions(PostgresSink):
    """Someone rolls back the prepared transaction of epoch 2's subtask 0 before the driver commits it."""

    def commit(self, record):
        if record["id"].startswith("statekit~sinks~keyed-process~2~0~"):
            self.recover_and_abort(record)
        super().commit(record)


def test_a_lost_transaction_is_a_clear_error_or_skipped_when_allowed(spark, statekit_settings, tmp_path, postgres,
                                                                     pg_table):
    job = Job(spark, statekit_settings, tmp_path)
    with pytest.raises(Exception, match="can no longer be committed.*sink.ignore-lost-transactions=true"):
        job.run(LosingTransactions(postgres.conninfo, pg_table))
    # epoch 2's first transaction (subtask 0) was lost, so none of epoch 2 was committed
    assert _pg_rows(postgres, pg_table) == Counter(expected_outputs(job.epochs[0], []))
    statekit_settings({"sink.ignore-lost-transactions": "true"})
    job.run(PostgresSink(postgres.conninfo, pg_table))  # the restart skips subtask 0's, commits subtask 1's
    lost = job.checkpoint().properties[SINK_PROPERTY]["outputs"][0]["rows"]
    found = _pg_rows(postgres, pg_table)
    assert not found - job.expected() and sum(found.values()) == sum(job.expected().values()) - lost


def test_sqlite_write_ahead_sink(spark, statekit_settings, tmp_path):
    database = tmp_path / "out.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE output (key TEXT, n INTEGER)")
    job = Job(spark, statekit_settings, tmp_path, backend="rocksdb")
    job.run(SqliteWriteAheadSink(str(database), "output", columns=["key", "n"]))
    with sqlite3.connect(database) as connection:
        assert Counter(connection.execute("SELECT key, n FROM output").fetchall()) == job.expected()
    logs = [o["log"] for o in job.checkpoint().properties[SINK_PROPERTY]["outputs"]]
    assert len(logs) == 2  # each subtask's output was logged in checkpoint storage


# --- the sinks' contracts, without Spark

def test_a_write_ahead_publication_happens_once(tmp_path):
    database = tmp_path / "t.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE t (key TEXT, count INTEGER)")
    sink = SqliteWriteAheadSink(str(database), "t")
    sink.prepare_target("job", "op")
    batch = pa.RecordBatch.from_pydict({"key": ["a", "b"], "count": [1, 2]})
    for _ in range(3):
        sink.publish(SinkContext("job", "op", 7, 0), [batch])
    sink.publish(SinkContext("job", "op", 7, 1), [batch])
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM t").fetchone()[0] == 4


def test_file_commit_is_idempotent_and_a_lost_staged_file_is_named(tmp_path):
    sink = ParquetFileSink(tmp_path.as_uri())
    context = SinkContext("job", "op", 3, 1, "run", 0)
    transaction = sink.begin_transaction(context)
    sink.write(transaction, pa.RecordBatch.from_pydict({"key": ["a"], "count": [1]}))
    record = sink.pre_commit(transaction)
    assert sink.lingering("job", "op") == [{"id": context.transaction_id, "staged": record["staged"]}]
    assert sink.lingering("job", "other") == [] and sink.lingering("jo", "b~op") == []
    sink.commit(record)
    sink.commit(record)  # again, after a crash between commit and the next step: nothing changes
    assert _parquet_rows(str(tmp_path)) == Counter({("a", 1): 1}) and sink.lingering("job", "op") == []
    (tmp_path / record["final"]).unlink()
    with pytest.raises(TransactionLostError, match="staged file .* is gone"):
        sink.commit(record)


def test_local_file_output_reaches_the_disk_at_pre_commit_and_commit(tmp_path, monkeypatch):
    """On file://, pre-commit syncs the staged file and the directory entries leading to it (its
    staging and sink directories are new here): the checkpoint that records the transaction promises
    its output. Commit syncs the rename before returning: the next checkpoint forgets the transaction,
    so a rename an OS crash took back would leave the output staged, and then aborted as lingering."""
    events = record_syncs(monkeypatch)
    root = os.path.realpath(tmp_path)
    sink = ParquetFileSink((tmp_path / "new" / "out").as_uri())
    transaction = sink.begin_transaction(SinkContext("job", "op", 3, 1, "run", 0))
    sink.write(transaction, pa.RecordBatch.from_pydict({"key": ["a"], "count": [1]}))
    synced = {path for kind, path in events if kind == "fsync"}
    assert {root, os.path.join(root, "new"), os.path.join(root, "new", "out")} <= synced, \
        f"the new sink and staging directories' entries were not synced: {sorted(synced)}"
    del events[:]
    record = sink.pre_commit(transaction)
    staged = os.path.join(root, "new", "out", record["staged"])
    assert {("fsync", staged), ("fsync", os.path.dirname(staged)),
            ("fsync", os.path.dirname(os.path.dirname(staged)))} <= set(events), \
        f"pre-commit returned before {staged} was synced: {events}"
    del events[:]
    sink.commit(record)
    final = os.path.join(root, "new", "out", record["final"])
    assert os.path.exists(final)
    assert ("fsync", os.path.dirname(final)) in events and ("fsync", os.path.dirname(staged)) in events, \
        f"commit returned before its rename was synced: {events}"


def test_postgres_recovery_commits_once_and_aborts_lingering(postgres, pg_table):
    sink = PostgresSink(postgres.conninfo, pg_table)
    sink.prepare_target("job", "op")
    records = []
    for subtask in (0, 1):
        transaction = sink.begin_transaction(SinkContext("job", "op", 1, subtask, "r", 0))
        sink.write(transaction, pa.RecordBatch.from_pydict({"key": [f"k{subtask}"], "count": [subtask]}))
        records.append(sink.pre_commit(transaction))
    assert sorted(r["id"] for r in sink.lingering("job", "op")) == sorted(r["id"] for r in records)
    assert _pg_rows(postgres, pg_table) == Counter()  # prepared, not visible
    sink.commit(records[0])
    sink.recover_and_commit(records[0])  # committed already: a no-op
    sink.recover_and_abort(records[1])
    sink.recover_and_abort(records[1])  # gone already: a no-op
    assert _pg_rows(postgres, pg_table) == Counter({("k0", 0): 1})
    with pytest.raises(TransactionLostError, match="gone from the PostgreSQL server and was never committed"):
        sink.commit(records[1])


def test_postgres_without_prepared_transactions_is_refused(tmp_path):
    import pgserver
    server = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")  # PostgreSQL's defaults
    try:
        with pytest.raises(SinkError, match="max_prepared_transactions"):
            PostgresSink(server.get_uri(), "t").prepare_target("job", "op")
    finally:
        server.cleanup()


def test_what_is_not_a_sink_is_refused(spark, tmp_path):
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with pytest.raises(ConfigurationError, match="neither a sink"):
        process_keyed_stream(stream, "key", WorkloadFunction(), OUTPUT, "s3://bucket/out",
                             checkpoint_location=str(tmp_path / "c"))


class _TaskAttempt:
    """A stand-in for Spark's ``TaskContext`` of one task attempt."""

    def __init__(self, attempt_number, task_attempt_id):
        self._attempt_number, self._task_attempt_id = attempt_number, task_attempt_id

    def attemptNumber(self):
        return self._attempt_number

    def taskAttemptId(self):
        return self._task_attempt_id


def test_attempts_of_a_task_in_two_stage_attempts_have_their_own_transactions(tmp_path, monkeypatch):
    """Spark numbers a task's attempts anew when it retries the stage (after a fetch failure):
    the retried stage's first attempt and a zombie attempt of the first stage both have attempt
    number 0 (SPARK-24552). Their transactions must still differ: the zombie, killed once the
    stage completes, aborts its own transaction, never the one the checkpoint records."""
    from statekit.spark import task as spark_task
    spec = type("Spec", (), {"job_id": "job", "operator_id": "op", "checkpoint_id": 4, "sink_run": "run"})()
    sink = ParquetFileSink(tmp_path.as_uri())
    rows = pa.RecordBatch.from_pydict({"key": ["a", "b"], "count": [1, 2]})
    transactions = []
    for attempt in (_TaskAttempt(0, 17), _TaskAttempt(0, 23)):  # stage attempt 0 (a zombie), stage attempt 1
        monkeypatch.setattr(spark_task.TaskContext, "get", staticmethod(lambda attempt=attempt: attempt))
        transaction = sink.begin_transaction(spark_task._sink_context(spec, 1))
        sink.write(transaction, rows)
        transactions.append(transaction)
    zombie, retried = transactions
    assert zombie.context.transaction_id != retried.context.transaction_id
    record = sink.pre_commit(retried)  # the retried stage's attempt acknowledges
    sink.abort(zombie)  # the zombie is killed
    sink.commit(record)
    assert _parquet_rows(str(tmp_path)) == Counter({("a", 1): 1, ("b", 2): 1})


def test_jobs_sharing_a_directory_never_replace_each_others_files(tmp_path):
    """Job and operator ids may both contain '-': job 'a' with operator 'b-c' and job 'a-b' with
    operator 'c' write the same epochs to the same directory, and both outputs stay."""
    sink = ParquetFileSink(tmp_path.as_uri())
    for job_id, operator_id, key in (("a", "b-c", "first"), ("a-b", "c", "second")):
        transaction = sink.begin_transaction(SinkContext(job_id, operator_id, 1, 0, "run", 0))
        sink.write(transaction, pa.RecordBatch.from_pydict({"key": [key], "count": [1]}))
        sink.commit(sink.pre_commit(transaction))
    assert _parquet_rows(str(tmp_path)) == Counter({("first", 1): 1, ("second", 1): 1})


def test_a_job_restored_from_another_jobs_checkpoint_commits_the_output_that_checkpoint_records(
        spark, statekit_settings, tmp_path):
    """Job 'sinks' stops after checkpoint 1 completed but before its output was committed; it goes
    on as a new query and job restored from that checkpoint (as the ownership error advises). The
    restored state includes epoch 1, so its output must be committed too (Flink commits the pending
    transactions of the checkpoint it restores, whichever job restores it)."""
    job = Job(spark, statekit_settings, tmp_path)
    out = (tmp_path / "out").as_uri()
    with pytest.raises(Exception, match="Nothing is lost"):
        job.run(FlakyCommit(out, tmp_path / "calls", 1, ValueError("bucket policy denies")))
    statekit_settings({"restore.path": (tmp_path / "checkpoints" / "sinks" / "chk-1").as_uri()})
    write_micro_batches(tmp_path / "next", job.epochs[1:])
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "next" / "source"))
    process_keyed_stream(stream, "key", WorkloadFunction(), OUTPUT, ParquetFileSink(out),
                         checkpoint_location=str(tmp_path / "next" / "spark-checkpoint"), job_id="sinks-next",
                         trigger={"availableNow": True}).awaitTermination()
    assert _parquet_rows(str(tmp_path / "out")) == job.expected()


class FlakyPublish(SqliteWriteAheadSink):
    """Every publication fails ``failures`` times first (counted in a file: publications run on the driver)."""

    def __init__(self, database, table, counter, failures):
        super().__init__(database, table)
        self.counter, self.failures = counter, failures

    def publish(self, context, batches):
        calls = int(self.counter.read_text()) if self.counter.exists() else 0
        self.counter.write_text(str(calls + 1))
        if calls < self.failures:
            raise ValueError("disk quota exceeded")
        super().publish(context, batches)


def test_a_savepoint_carries_unpublished_write_ahead_output_to_the_job_that_restores_it(
        spark, statekit_settings, tmp_path):
    """Job 'sinks' stops after checkpoint 1 completed but before its logged output was published; a
    savepoint of it is taken and the job's checkpoints are removed. A new job restored from the
    savepoint publishes that output (from the savepoint's copy of the log), once: under the source
    job's key, so restoring the savepoint again publishes nothing twice."""
    from statekit.sinks.sqlite import published
    from statekit.spark.savepoints import savepoint
    database = tmp_path / "out.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE output (key TEXT, count INTEGER)")
    job = Job(spark, statekit_settings, tmp_path)
    statekit_settings({"checkpoint.filesystem.memory-threshold": "0"})  # the logs are files, not inline
    with pytest.raises(Exception, match="Nothing is lost"):
        job.run(FlakyPublish(str(database), "output", tmp_path / "calls", 1))
    statekit_settings({"savepoint.dir": (tmp_path / "savepoints").as_uri()})
    url = savepoint(spark, "sinks")
    shutil.rmtree(tmp_path / "checkpoints" / "sinks")
    statekit_settings({"restore.path": url})
    for name in ("next", "again"):  # two jobs restore it, and each processes epoch 2's rows
        write_micro_batches(tmp_path / name, job.epochs[1:])
        stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / name / "source"))
        process_keyed_stream(stream, "key", WorkloadFunction(), OUTPUT, SqliteWriteAheadSink(str(database), "output"),
                             checkpoint_location=str(tmp_path / name / "spark-checkpoint"), job_id=f"sinks-{name}",
                             trigger={"availableNow": True}).awaitTermination()
    with sqlite3.connect(database) as connection:
        found = Counter(connection.execute("SELECT key, count FROM output").fetchall())
    assert found == job.expected() + Counter(expected_outputs(job.epochs[1], job.epochs[0]))
    assert [(epoch, subtask) for _, epoch, subtask, _ in published(str(database), "sinks")] == [(1, 0), (1, 1)]


def test_postgres_table_names_are_matched_as_the_rows_are_written_exactly(postgres):
    """The rows go to the table named exactly (a quoted identifier, letter case included), so the
    check before the job starts finds that same table: a quoted mixed-case table is accepted, and a
    name that matches only after folding to lower case is refused there, not by every task."""
    with psycopg.connect(postgres.conninfo, autocommit=True) as connection:
        connection.execute('DROP TABLE IF EXISTS "Totals", folded')
        connection.execute('CREATE TABLE "Totals" (key text, count bigint)')
        connection.execute("CREATE TABLE Folded (key text, count bigint)")  # stored as folded
    sink = PostgresSink(postgres.conninfo, "Totals")
    sink.prepare_target("job", "op")
    transaction = sink.begin_transaction(SinkContext("job", "op", 1, 0, "case", 0))
    sink.write(transaction, pa.RecordBatch.from_pydict({"key": ["a"], "count": [1]}))
    sink.commit(sink.pre_commit(transaction))
    assert _pg_rows(postgres, '"Totals"') == Counter({("a", 1): 1})
    with pytest.raises(SinkError, match="Folded does not exist.*letter case.*folded"):
        PostgresSink(postgres.conninfo, "Folded").prepare_target("job", "op")


def test_sqlite_table_names_are_matched_as_sqlite_matches_them(tmp_path):
    """SQLite matches table names regardless of letter case, when the rows are written and so
    before the job starts."""
    database = tmp_path / "t.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE Totals (key TEXT, count INTEGER)")
    sink = SqliteWriteAheadSink(str(database), "totals")
    sink.prepare_target("job", "op")
    sink.publish(SinkContext("job", "op", 1, 0), [pa.RecordBatch.from_pydict({"key": ["a"], "count": [1]})])
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT key, count FROM Totals").fetchall() == [("a", 1)]
    with pytest.raises(SinkError, match="table missing in .* does not exist"):
        SqliteWriteAheadSink(str(database), "missing").prepare_target("job", "op")


def test_a_sink_class_instead_of_a_sink_is_refused(spark, tmp_path):
    """A class is callable, but it is no function sink: it would be called with each micro-batch's
    output after its checkpoint completed, and fail there on what it was given."""
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path))
    with pytest.raises(ConfigurationError, match="ParquetFileSink is a sink class: pass a sink, e.g. ParquetFileSink"):
        process_keyed_stream(stream, "key", WorkloadFunction(), OUTPUT, ParquetFileSink,
                             checkpoint_location=str(tmp_path / "c"))


def test_restored_output_a_sink_cannot_commit_is_a_clear_error_or_skipped_when_allowed(tmp_path):
    """The restored snapshot records output of another kind of sink, or of a target this sink does
    not write to: the error names the snapshot, its job and the way on."""
    from statekit.runtime.sink_coordinator import SinkCoordinator
    from statekit.storage.inline import InlineStreams
    staged = {"id": "statekit~old~op~1~0~run~7", "staged": f"{STAGING_DIR}/gone.parquet", "final": "gone.parquet"}
    outputs = [{"subtask": 0, "epoch": 1, "rows": 3, "transaction": staged}]
    for kind, error, message in (
            ("write-ahead", SinkError, r"the restored snapshot file:///sp \(job 'old'\) records output of a "
                                       r"write-ahead sink.*run job 'old' once more.*ignore-lost-transactions=true"),
            ("two-phase-commit", TransactionLostError, r"job 'old' \(restored from file:///sp\).*does this job's sink "
                                                       r"write to the target job 'old' wrote to\?.*ignore-lost")):
        restored = CheckpointMetadata(1, "old", {}, properties={
            SINK_PROPERTY: {"operator": "op", "kind": kind, "outputs": outputs}})
        for ignore_lost in (False, True):
            coordinator = SinkCoordinator(ParquetFileSink(tmp_path.as_uri()), "new", "op", ignore_lost=ignore_lost)
            if ignore_lost:
                coordinator.commit_restored(restored, "file:///sp", InlineStreams())
            else:
                with pytest.raises(error, match=message):
                    coordinator.commit_restored(restored, "file:///sp", InlineStreams())


def test_a_discarding_sink_is_a_kind_of_its_own_when_the_sink_changes(tmp_path, postgres, pg_table):
    """A checkpoint a DiscardingSink recorded holds no output: a job with a real sink that restores
    or continues from it commits nothing there and goes on. A job switching to a DiscardingSink is
    stopped while the latest checkpoint records another sink's output: dropping it would lose it."""
    from statekit.runtime.sink_coordinator import SinkCoordinator
    from statekit.storage.inline import InlineStreams
    discarded = CheckpointMetadata(4, "bootstrap", {}, properties={SINK_PROPERTY: {
        "operator": "op", "kind": "discarding", "outputs": [{"subtask": 0, "epoch": 4, "rows": 9, "transaction": {}}]}})
    with sqlite3.connect(tmp_path / "out.db") as connection:
        connection.execute("CREATE TABLE out (key TEXT, count INTEGER)")
    for sink in (ParquetFileSink(tmp_path.as_uri()), PostgresSink(postgres.conninfo, pg_table),
                 SqliteWriteAheadSink(str(tmp_path / "out.db"), "out")):
        coordinator = SinkCoordinator(sink, "bootstrap", "op")
        assert coordinator.recorded(discarded) == [], "recorded (the epoch is done), nothing to commit"
        coordinator.commit_restored(discarded, "file:///sp", InlineStreams())
        coordinator.recover(discarded, InlineStreams())

    staged = {"id": "statekit~job~op~1~0~run~7", "staged": f"{STAGING_DIR}/a.parquet", "final": "a.parquet"}
    parquet = CheckpointMetadata(1, "job", {}, properties={SINK_PROPERTY: {
        "operator": "op", "kind": "two-phase-commit", "outputs": [{"subtask": 0, "epoch": 1, "rows": 3,
                                                                    "transaction": staged}]}})
    with pytest.raises(SinkError, match=r"records output of a two-phase-commit sink, but the job now writes to "
                                        r"DiscardingSink, a discarding sink: run it once more with the sink it had"):
        SinkCoordinator(DiscardingSink(), "job", "op").recover(parquet, InlineStreams())


# --- a sink's target that cannot work is refused naming it and the fix, never a raw driver error

def test_an_sqlite_database_in_a_missing_directory_is_refused_at_construction(tmp_path):
    with pytest.raises(ConfigurationError, match=r"database=.*missing.*the directory .*missing does not exist.*create "
                                                 r"it"):
        SqliteWriteAheadSink(str(tmp_path / "missing" / "out.sqlite"), "t")


def test_a_read_only_sqlite_database_is_refused_at_construction(tmp_path):
    """Read-only for the process: permissions do not stop root, so as root the database is on a
    tmpfs remounted read-only."""
    from tmpfs import mounted_tmpfs, remount_read_only
    with contextlib.ExitStack() as stack:
        directory = tmp_path / "ro"
        if os.geteuid() == 0:
            stack.enter_context(mounted_tmpfs(directory))
        else:
            directory.mkdir()
        database = directory / "out.sqlite"
        with contextlib.closing(sqlite3.connect(database)) as connection:
            connection.execute("CREATE TABLE t (key TEXT, count INTEGER)")
        if os.geteuid() == 0:
            remount_read_only(directory)
        else:
            database.chmod(0o444)
            directory.chmod(0o555)
            stack.callback(directory.chmod, 0o755)
        with pytest.raises(ConfigurationError, match=r"out.sqlite.* is read-only for this process.*make both "
                                                     r"writable, or choose a database elsewhere"):
            SqliteWriteAheadSink(str(database), "t").prepare_target("job", "op")


def test_an_sqlite_table_without_an_output_column_is_named(tmp_path):
    database = tmp_path / "t.sqlite"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE t (key TEXT)")
    sink = SqliteWriteAheadSink(str(database), "t")
    sink.prepare_target("job", "op")
    batch = pa.RecordBatch.from_pydict({"key": ["a"], "count": [1]})
    with pytest.raises(SinkError, match=r"SQLite table t in .* has no column 'count' for the output.*ALTER TABLE "
                                        r"\"t\" ADD COLUMN.*columns=\[...\]"):
        sink.publish(SinkContext("job", "op", 1, 0), [batch])
    with pytest.raises(SinkError, match="has no column 'n'"):  # named columns: checked before the job starts
        SqliteWriteAheadSink(str(database), "t", columns=["key", "n"]).prepare_target("job", "op")
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM t").fetchone()[0] == 0
        assert connection.execute(f"SELECT count(*) FROM {PUBLISHED_TABLE}").fetchone()[0] == 0


def test_a_postgres_server_refusing_the_connection_is_named_without_the_password():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for conninfo in (f"host=127.0.0.1 port={port} user=postgres password=Secret-pw dbname=postgres",
                     f"postgresql://postgres:Secret-pw@127.0.0.1:{port}/postgres"):
        sink = PostgresSink(conninfo, "t")
        with pytest.raises(SinkError, match=rf"cannot connect to the PostgreSQL server at .*port={port}.*Connection "
                                            rf"refused.*check that the server runs") as caught:
            sink.prepare_target("job", "op")
        assert "Secret-pw" not in str(caught.value) and "password=***" in str(caught.value)
        assert sink.is_transient(caught.value), "a refused connection is worth retrying in a commit"


@pytest.mark.parametrize("conninfo", ["host=127.0.0.1 password=Secret-pw dbname", "host=127.0.0.1 password=Secret pw",
                                      "host=127.0.0.1 port=5432 oops=1 password='Secret-pw'"])
def test_a_malformed_postgres_conninfo_is_refused_at_construction_without_the_password(conninfo):
    with pytest.raises(ConfigurationError, match=r"PostgresSink\(conninfo=.*is not a connection string libpq takes.*"
                                                 r"postgresql://user:password@host:port/dbname") as caught:
        PostgresSink(conninfo, "t")
    assert "Secret" not in str(caught.value), caught.value


def test_a_postgres_table_without_an_output_column_is_named(postgres):
    with psycopg.connect(postgres.conninfo, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS keys_only")
        connection.execute("CREATE TABLE keys_only (key text)")
    sink = PostgresSink(postgres.conninfo, "keys_only")
    sink.prepare_target("job", "op")
    transaction = sink.begin_transaction(SinkContext("job", "op", 1, 0, "cols", 0))
    with pytest.raises(SinkError, match=r"PostgreSQL table keys_only has no column for an output column \(column "
                                        r"\"count\" of relation \"keys_only\" does not exist\).*add the missing column"):
        sink.write(transaction, pa.RecordBatch.from_pydict({"key": ["a"], "count": [1]}))
    sink.abort(transaction)


@pytest.mark.parametrize("under", ["", "out", "out/deeper"])
def test_a_parquet_sink_on_a_path_under_a_regular_file_is_refused_at_construction(tmp_path, under):
    (tmp_path / "a-file").write_text("not a directory")
    path = tmp_path / "a-file" / under if under else tmp_path / "a-file"
    with pytest.raises(ConfigurationError, match=r"ParquetFileSink\(path=.*(is|lies under .*a-file, which is) a "
                                                 r"regular file, not a directory.*choose a path"):
        ParquetFileSink(path.as_uri())
