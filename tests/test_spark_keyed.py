"""The Spark runner's configuration: wrong settings fail before any job runs, naming the setting;
the job id can come from conf. Checkpoints, restore, rescale, task failures, streaming restarts
and backend switches run in the conformance suite's Spark level (tests/test_conformance_*.py)."""
import datetime
import decimal
import sys

import pytest
from pyspark import cloudpickle

from statekit.conformance_tests.spark import OUTPUT, SCHEMA
from statekit.conformance_tests.workload import WorkloadFunction, make_rows
from statekit.spark import StatekitConf, latest_checkpoint, process_keyed
from statekit.spi import ConfigurationError

pytestmark = pytest.mark.spark
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # its functions run in the executors' workers


def test_invalid_conf_fails_before_any_job(spark, statekit_settings):
    statekit_settings(backend="nosuch")
    df = spark.createDataFrame(make_rows(10, 5, 1), SCHEMA)
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.backend='nosuch' is unknown; accepted: heap"):
        process_keyed(df, "key", WorkloadFunction(), OUTPUT, job_id="bad")


@pytest.mark.parametrize("settings,message", [
    ({"checkpoint.storage": "filesystem"}, r"needs spark\.statekit\.checkpoint\.dir"),
    ({"parallelism": "zero"}, r"spark\.statekit\.parallelism must be a whole number from 1 to 32768"),
    ({"checkpoint.incremental": "maybe"}, r"spark\.statekit\.checkpoint\.incremental must be true or false"),
    ({"restore.mode": "steal"}, r"spark\.statekit\.restore\.mode must be one of"),
    ({"backend.rocksdb.compression": "brotli", "backend": "rocksdb"}, r"compression must be one of"),
    ({"chekpoint.dir": "/tmp"}, r"unknown setting spark\.statekit\.chekpoint\.dir"),
    ({"batch.max-bytes": "lots"}, r"spark\.statekit\.batch\.max-bytes must be a size in bytes from 1 to 2g"),
])
def test_conf_errors_name_the_setting(settings, message):
    with pytest.raises(ConfigurationError, match=message):
        StatekitConf.parse(settings)


def test_job_id_comes_from_conf(spark, statekit_settings):
    statekit_settings({"job-id": "from-conf", "parallelism": 2})
    df = spark.createDataFrame(make_rows(50, 10, 3), SCHEMA)
    process_keyed(df, "key", WorkloadFunction(), OUTPUT).collect()
    latest, _ = latest_checkpoint(spark, "from-conf")
    assert latest.checkpoint_id == 1


def test_storage_options_from_conf_reach_the_storage(tmp_path):
    """Kebab-case storage options, as Spark conf gives them (a TypeError before)."""
    memory = StatekitConf.parse({"checkpoint.jobmanager.max-state-size": "10m"}).create_storage()
    assert memory.max_state_size == 10 << 20
    files = StatekitConf.parse({"checkpoint.storage": "filesystem", "checkpoint.dir": tmp_path.as_uri(),
                                "checkpoint.filesystem.memory-threshold": "1k"}).create_storage()
    assert files.memory_threshold == 1024



def test_each_subtask_runs_as_a_task_of_its_own_with_adaptive_execution_on(spark, statekit_settings):
    """Adaptive execution (on by default) coalesces small shuffle partitions; statekit's p subtasks
    must still be p tasks running in parallel, and the session's settings stay as they were."""
    class PartitionOfSubtask(WorkloadFunction):  # defined here: pickled by value
        """Emits (its subtask, the Spark partition it runs in) once per epoch."""

        def open(self, ctx):
            super().open(ctx)
            self.subtask, self.emitted = ctx.subtask_index, False

        def process(self, row, ctx):
            list(super().process(row, ctx))
            if not self.emitted:
                from pyspark import TaskContext
                self.emitted = True
                yield str(self.subtask), TaskContext.get().partitionId()

    statekit_settings({"parallelism": 4})
    before = dict(spark.conf.getAll)
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    df = spark.createDataFrame(make_rows(400, 100, 5), SCHEMA)
    rows = process_keyed(df, "key", PartitionOfSubtask(), OUTPUT, job_id="one-task-per-subtask").collect()
    partitions = {int(r["key"]): r["count"] for r in rows}
    assert sorted(partitions) == [0, 1, 2, 3], f"subtasks that ran: {sorted(partitions)}"
    assert len(set(partitions.values())) == 4, f"subtasks shared Spark partitions: {partitions}"
    assert dict(spark.conf.getAll) == before, "process_keyed changed the session's settings"


@pytest.mark.parametrize("settings,message", [
    ({"checkpoint.num-retaned": "5"}, r"unknown setting spark\.statekit\.checkpoint\.num-retaned \(did you mean "
                                      r"spark\.statekit\.checkpoint\.num-retained\?\)"),
    ({"checkpoint.incremantal": "true"}, r"did you mean spark\.statekit\.checkpoint\.incremental\?"),
    ({"backend.heapp": "x"}, r"unknown setting spark\.statekit\.backend\.heapp"),
])
def test_misspelt_settings_are_unknown_settings_not_options_of_another_component(settings, message):
    """``checkpoint.<typo>`` was reported as an option of another checkpoint storage (a wrong cause
    and fix) and ``backend.<typo>`` was ignored: an option of a backend or a storage has the form
    ``backend.<name>.<option>`` / ``checkpoint.<name>.<option>``."""
    with pytest.raises(ConfigurationError, match=message):
        StatekitConf.parse(settings)


@pytest.mark.parametrize("key_type,rows", [
    ("array<int>", [([1, 2],), ([3],)]),
    ("struct<a:int,b:string>", [((1, "x"),)]),
    ("map<string,int>", [({"x": 1},)]),
])
def test_nested_key_columns_fail_before_any_job(spark, key_type, rows):
    """A nested value is no hashable key: the epoch failed in the Python workers (unhashable type
    'list', or Arrow cannot sort the column)."""
    df = spark.createDataFrame(rows, f"k {key_type}")
    with pytest.raises(ConfigurationError, match=rf"key column 'k' is {key_type.split('<')[0]}<.*several key columns"):
        process_keyed(df, "k", WorkloadFunction(), OUTPUT, job_id="nested-key")


@pytest.mark.parametrize("column,keys", [("user.id", "user.id"), ("a`b", "key")])
def test_column_names_spark_cannot_map_fail_before_any_job(spark, column, keys):
    """PySpark's mapInArrow reads a dotted name as a struct field: the job failed in Spark's analysis
    with a column that "cannot be resolved" (suggesting the very column), key column or not."""
    df = spark.createDataFrame(make_rows(10, 5, 1), SCHEMA).withColumnRenamed("key" if keys != "key" else "category",
                                                                               column)
    with pytest.raises(ConfigurationError, match=r"have a dot or a backtick in their names.*withColumnRenamed"):
        process_keyed(df, keys, WorkloadFunction(), OUTPUT, job_id="dotted-column")


def test_a_parallelism_past_the_jobs_key_groups_names_the_fixed_limit(spark, statekit_settings):
    """A job's key groups are fixed by its first checkpoint: the error said "raise max parallelism
    or lower parallelism", and raising it is refused next (the number of key groups is fixed)."""
    statekit_settings({"parallelism": 2, "max-parallelism": 4})
    df = spark.createDataFrame(make_rows(20, 5, 1), SCHEMA)
    process_keyed(df, "key", WorkloadFunction(), OUTPUT, job_id="past-the-key-groups").collect()
    statekit_settings({"parallelism": 6})
    spark.conf.unset("spark.statekit.max-parallelism")
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.parallelism=6 exceeds the job's max parallelism "
                                                 r"4, fixed since its first checkpoint.*at most 4$"):
        process_keyed(df, "key", WorkloadFunction(), OUTPUT, job_id="past-the-key-groups")


@pytest.mark.parametrize("kind", ["vector", "batch"])
def test_a_function_of_two_kinds_is_called_alike_by_both_runners(spark, statekit_settings, kind):
    """A KeyedVectorFunction (or KeyedBatchFunction) that also subclasses a KeyedProcessFunction (to
    reuse its open, as the conformance workload does): the local runner called process_groups
    (process_rows), the Spark runner called process on every row."""
    from statekit.runtime import KeyedBatchFunction, KeyedProcessFunction, KeyedVectorFunction, LocalRunner

    class PerRow(KeyedProcessFunction):  # defined here: pickled by value
        def process(self, row, ctx):
            yield "process", 1

    class Grouped(PerRow, KeyedVectorFunction):
        def process_groups(self, groups, ctx):
            return [("process_groups", groups.num_rows)]

    class Batched(PerRow, KeyedBatchFunction):
        def process_rows(self, key, rows, ctx):
            return [("process_rows", rows.num_rows)]

    function = Grouped() if kind == "vector" else Batched()
    statekit_settings({"parallelism": 1})
    rows = make_rows(30, 3, 2)
    local = LocalRunner(function, key_selector=lambda row: row["key"], parallelism=1).run_epoch(
        [dict(zip(("key", "category", "amount"), row)) for row in rows])
    on_spark = process_keyed(spark.createDataFrame(rows, SCHEMA), "key", function, OUTPUT,
                             job_id=f"two-kinds-{kind}").collect()
    assert {name for name, _ in local} == {f"process_{'groups' if kind == 'vector' else 'rows'}"}
    assert sorted((r["key"], r["count"]) for r in on_spark) == sorted(local)


def test_a_key_column_of_a_case_insensitive_collation_fails_before_any_job(spark):
    """Spark's groupBy (and so pre-aggregation) takes 'A' and 'a' of a UTF8_LCASE column as one key,
    but xxhash64 and Python compare bytes: the job had two keys without pre_aggregate and one with it."""
    from pyspark.sql import functions as F

    from statekit.runtime import KeyedProcessFunction

    class Keys(KeyedProcessFunction):  # defined here: pickled by value
        def process(self, row, ctx):
            yield ctx.current_key, row["v"]

    df = spark.sql("select * from values ('A' collate UTF8_LCASE, 1), ('a' collate UTF8_LCASE, 2) as t(k, v)")
    with pytest.raises(ConfigurationError, match=r"key column 'k' is string collate UTF8_LCASE.*F\.collate"):
        process_keyed(df, "k", Keys(), OUTPUT, job_id="collated-key")
    binary = df.select(F.collate("k", "UTF8_BINARY").alias("k"), "v")
    assert sorted(process_keyed(binary, "k", Keys(), OUTPUT, job_id="collated-key").collect()) == [("A", 1), ("a", 2)]


@pytest.mark.parametrize("value, returned", [("x", "str 'x'"), (1.5, "float 1.5")])
def test_a_value_of_the_wrong_type_for_an_output_column_fails_the_job_naming_it(spark, statekit_settings, value,
                                                                                returned):
    """Checked on each subtask's first output rows, before the subtask goes on; the worker's
    FunctionResultError is raised again on the driver. A float in a bigint column was truncated
    silently by the conversion to Arrow (1.5 became 1) and the job succeeded."""
    from statekit.runtime import KeyedProcessFunction
    from statekit.spi.errors import FunctionResultError

    class WrongCount(KeyedProcessFunction):  # defined here: pickled by value
        def __init__(self, count):
            self.count = count

        def process(self, row, ctx):
            yield ctx.current_key, self.count

    statekit_settings({"parallelism": 2})
    df = spark.createDataFrame(make_rows(40, 8, 3), SCHEMA)
    with pytest.raises(FunctionResultError, match=rf"WrongCount returned {returned} for output column 'count', which "
                                                  rf"the output schema declares bigint: return an int there"):
        process_keyed(df, "key", WrongCount(value), OUTPUT, job_id=f"wrong-type-{type(value).__name__}")


def test_the_session_facts_statekit_asks_for_are_the_spark_contexts(spark):
    """Default parallelism and application name through conf and a DataFrame (what a Spark Connect
    session offers), equal to what the classic session's SparkContext says, also while
    spark.sql.leafNodeDefaultParallelism (which a Connect session's DataFrames follow) is set."""
    from statekit.spark.session import LEAF_PARALLELISM_SETTING, application_name, default_parallelism, is_connect

    assert not is_connect(spark)
    assert application_name(spark) == spark.sparkContext.appName
    assert default_parallelism(spark) == spark.sparkContext.defaultParallelism == 2
    spark.conf.set(LEAF_PARALLELISM_SETTING, "5")
    try:
        assert default_parallelism(spark) == 2
        assert spark.conf.get(LEAF_PARALLELISM_SETTING) == "5", "the setting was not restored"
    finally:
        spark.conf.unset(LEAF_PARALLELISM_SETTING)


def test_not_null_output_columns_keep_their_nullability_and_values(spark, statekit_settings, tmp_path):
    """Each subtask's acknowledgement travels as a row of the stage, with placeholders in NOT NULL
    columns of every kind; the output keeps the declared NOT NULL columns and only the rows."""
    class EveryOtherKey(WorkloadFunction):  # defined here: pickled by value
        """Output for keys of an even number only: some subtasks end without output rows."""

        def process(self, row, ctx):
            for _ in super().process(row, ctx):
                if int(ctx.current_key.split("-")[1]) % 2 == 0:
                    yield {"key": ctx.current_key, "n": 1, "day": datetime.date(2024, 1, 2),
                           "at": datetime.datetime(2024, 1, 2, 3, 4, 5), "amount": decimal.Decimal("1.50"),
                           "tags": ["a"], "counts": {"a": 1}, "pair": {"x": 1, "y": None}, "raw": b"x", "ratio": 0.5,
                           "flag": True}

    statekit_settings({"parallelism": 4, "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri()})
    schema = ("key string not null, n bigint not null, day date not null, at timestamp not null, "
              "amount decimal(10,2) not null, tags array<string> not null, counts map<string,int> not null, "
              "pair struct<x:int not null,y:string> not null, raw binary not null, ratio double not null, "
              "flag boolean not null")
    rows = [(f"key-{i}", "a", 1) for i in range(2)]  # two keys: some of the four subtasks have none
    out = process_keyed(spark.createDataFrame(rows, SCHEMA), "key", EveryOtherKey(), schema, job_id="not-null")
    assert [field.nullable for field in out.schema.fields] == [False] * 11
    assert [tuple(r)[:2] for r in out.collect()] == [("key-0", 1)]


class FailsSubtask1AfterSubtask0Uploaded(WorkloadFunction):
    """Subtask 1 fails the stage once subtask 0's new shared files for the epoch are uploaded (the
    files under ``shared`` stopped changing), so subtask 0 finished its snapshot first."""

    def __init__(self, shared: str, before: frozenset[str]) -> None:
        self.shared, self.before = shared, before

    def process(self, row, ctx):
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1:
            import os
            import time

            seen, stable_since, deadline = frozenset(), time.monotonic(), time.monotonic() + 120
            while time.monotonic() < deadline:
                now = frozenset(os.listdir(self.shared)) - self.before
                if now != seen:
                    seen, stable_since = now, time.monotonic()
                elif seen and time.monotonic() - stable_since > 3:
                    break
                time.sleep(0.1)
            raise RuntimeError(f"subtask 1 fails after subtask 0 uploaded {sorted(seen)}")
        yield from super().process(row, ctx)


def test_a_failed_stage_leaves_no_shared_files_of_the_subtasks_that_finished(spark, statekit_settings, tmp_path):
    """Subtask 0 uploads its new SST files for checkpoint 2 and finishes; subtask 1 fails the stage.
    The coordinator never learns subtask 0's handles (a failed stage's rows carry no
    acknowledgement), so aborting checkpoint 2 in the storage removes them: ``shared`` holds
    checkpoint 1's files alone, and the next run completes checkpoint 2."""
    statekit_settings({"backend": "rocksdb", "checkpoint.storage": "filesystem",
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(), "checkpoint.incremental": "true",
                       "checkpoint.filesystem.memory-threshold": "0",  # every SST file a shared file
                       "parallelism": 2, "max-parallelism": 128, "local.dir": str(tmp_path / "local")})
    shared = tmp_path / "checkpoints" / "orphans" / "shared"
    epochs = [make_rows(200, 40, seed) for seed in (1, 2)]
    process_keyed(spark.createDataFrame(epochs[0], SCHEMA), "key", WorkloadFunction(), OUTPUT, job_id="orphans")
    before = frozenset(p.name for p in shared.iterdir())
    assert before, "checkpoint 1 of an incremental RocksDB job wrote no shared files"
    failing = FailsSubtask1AfterSubtask0Uploaded(str(shared), before)
    with pytest.raises(Exception, match="subtask 1 fails after subtask 0 uploaded") as failed:
        process_keyed(spark.createDataFrame(epochs[1], SCHEMA), "key", failing, OUTPUT, job_id="orphans")
    assert "uploaded []" not in str(failed.value), "subtask 0 uploaded no shared file for checkpoint 2"
    left = sorted(p.name for p in shared.iterdir() if p.name not in before)
    assert left == [], f"the failed checkpoint 2 left shared files that no checkpoint references: {left}"
    process_keyed(spark.createDataFrame(epochs[1], SCHEMA), "key", WorkloadFunction(), OUTPUT, job_id="orphans")
    assert latest_checkpoint(spark, "orphans")[0].checkpoint_id == 2
