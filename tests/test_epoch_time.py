"""The processing time an epoch's state sees (what TTL measures against) is fixed per epoch and
the same when the epoch runs again: Spark's timestamp of a micro-batch, the time a bounded epoch
first ran (recorded in its checkpoint), or the local runner's clock."""
from __future__ import annotations

import json

from statekit import KeyedProcessFunction, StateTtlConfig, ValueStateDescriptor
from statekit.runtime import LocalRunner
from statekit.runtime.task import PROCESSING_TIME
from statekit.spark.query_checkpoint import QueryCheckpoint
from statekit.spark.restore_point import StreamProgress, epoch_processing_time


class Remember(KeyedProcessFunction):
    """Emits (key, what it remembered within 10 s) and remembers the row."""

    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last", ttl=StateTtlConfig(10)))

    def process(self, row, ctx):
        yield row[0], self.last.value()
        self.last.update(row[1])


def test_the_local_runner_reads_its_clock_once_per_epoch_and_records_it():
    times = iter([1_000_000, 1_005_000, 1_016_000])
    runner = LocalRunner(Remember(), lambda row: row[0], parallelism=2, clock=lambda: next(times))
    assert runner.run_epoch([("a", 1), ("b", 1)]) == [("a", None), ("b", None)]
    assert sorted(runner.run_epoch([("a", 2)])) == [("a", 1)]  # 5 s later: alive
    assert sorted(runner.run_epoch([("a", 3), ("b", 3)])) == [("a", None), ("b", None)]  # 11 s / 16 s: expired
    assert runner.latest_metadata().properties[PROCESSING_TIME] == 1_016_000


def test_a_bounded_epoch_run_again_sees_the_time_it_first_ran():
    runner = LocalRunner(Remember(), lambda row: row[0], parallelism=1, clock=lambda: 42_000)
    runner.run_epoch([("a", 1)])
    assert epoch_processing_time(runner.store, 1, None) == 42_000
    assert abs(epoch_processing_time(runner.store, 2, None) - 42_000) > 1_000_000  # a new epoch: now


def test_a_micro_batch_sees_sparks_timestamp_from_the_offset_log(tmp_path):
    (tmp_path / "offsets").mkdir()
    entry = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_123_456, "conf": {"spark.sql.shuffle.partitions": "2"}}
    (tmp_path / "offsets" / "7").write_text("v1\n" + json.dumps(entry) + '\n{"logOffset":7}\n')
    query = QueryCheckpoint(tmp_path.as_uri())
    assert query.batch_timestamp_ms(7) == 1_700_000_123_456
    assert query.batch_timestamp_ms(8) is None  # not planned yet
    runner = LocalRunner(Remember(), lambda row: row[0], parallelism=1, clock=lambda: 5)
    runner.run_epoch([("a", 1)])  # checkpoint 1 recorded time 5: Spark's timestamp still wins for a micro-batch
    progress = StreamProgress(query.identity(), tmp_path.as_uri(), None, query.batch_timestamp_ms(7))
    assert epoch_processing_time(runner.store, 1, progress) == 1_700_000_123_456
