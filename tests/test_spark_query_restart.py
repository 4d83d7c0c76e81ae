"""A streaming query whose driver is killed (SIGKILL) and started again from its Spark
checkpoint leaves exactly the state and output of a failure-free run: killed after statekit
committed an epoch but before Spark committed the micro-batch (Spark replays it), and killed
while a task was processing (that epoch's checkpoint never completed)."""
import signal

import pyarrow.parquet as pq
import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.timer_workload import DELAY_MS, make_timed_epochs, timer_oracle
from statekit.conformance_tests.workload import dump_state, expected_outputs, expected_state, make_rows
from statekit.runtime.event_time import WATERMARK
from statekit.runtime.task import PROCESSING_TIME
from statekit.spark import StatekitConf
from statekit.spark.query_checkpoint import QueryCheckpoint
from statekit.storage.pointers import resolve

from killable import run_killable, write_micro_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]
BATCHES = 4


@pytest.mark.parametrize("backend,kill", [("rocksdb", "sink:2"), ("heap", "task:2")])
def test_killed_query_restarts_exactly_once(tmp_path, backend, kill):
    epochs = [make_rows(600, 150, seed) for seed in range(41, 41 + BATCHES)]
    write_micro_batches(tmp_path, epochs)
    killed = run_killable(tmp_path, backend, kill)
    assert killed.returncode == -signal.SIGKILL, f"the driver was not killed:\n{killed.stderr[-3000:]}"
    restarted = run_killable(tmp_path, backend, "none")
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    resolved = resolve(f"file://{tmp_path}/checkpoints/killable")
    metadata = CheckpointMetadata.from_bytes(resolved.metadata)
    assert metadata.checkpoint_id == BATCHES
    # the epoch's processing time (TTL's clock) is Spark's timestamp of the micro-batch, replay or not
    sparks = QueryCheckpoint(f"file://{tmp_path}/spark-checkpoint").batch_timestamp_ms(BATCHES - 1)
    assert sparks is not None and metadata.properties[PROCESSING_TIME] == sparks
    reader = StatekitConf.parse({"backend": backend, "local.dir": str(tmp_path / "dump-local")}).create_backend()
    found = dump_state(metadata, resolved.streams, str(tmp_path / "dump"), state_backend=reader)
    assert found == expected_state([r for e in epochs for r in e])

    for batch in range(BATCHES):  # every micro-batch's output, the replayed one's included
        table = pq.read_table(tmp_path / "output" / f"batch-{batch}")
        history = [r for e in epochs[:batch] for r in e]
        assert sorted(zip(table["key"].to_pylist(), table["count"].to_pylist())) == \
            sorted(expected_outputs(epochs[batch], history)), f"micro-batch {batch}"


@pytest.mark.parametrize("backend,kill", [("lmdb", "sink:2"), ("rocksdb", "task:3")])
def test_a_replayed_micro_batch_fires_the_same_timers(tmp_path, backend, kill):
    """Event-time windows closed by timers: the driver is killed after statekit committed epoch 3
    (Spark replays micro-batch 2) or inside a task of micro-batch 3; after the restart every
    micro-batch's windows, and the windows still open in the last checkpoint, are those of a
    failure-free run: the replay had the recorded watermark and fired the same timers."""
    epochs = make_timed_epochs(5, 300, 40, seed=17)
    open_windows: dict = {}
    expected = timer_oracle(epochs, open_windows=open_windows)
    write_micro_batches(tmp_path, epochs, ("key", "ts"))
    killed = run_killable(tmp_path, backend, kill, "timers")
    assert killed.returncode == -signal.SIGKILL, f"the driver was not killed:\n{killed.stderr[-3000:]}"
    restarted = run_killable(tmp_path, backend, "none", "timers")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    for batch in range(len(epochs)):  # processing-time rows depend on Spark's clock: windows only
        table = pq.read_table(tmp_path / "output" / f"batch-{batch}").to_pylist()
        found = [tuple(row.values()) for row in table if row["kind"] == "window"]
        assert sorted(found) == sorted(r for r in expected[batch] if r[0] == "window"), f"micro-batch {batch}"
    resolved = resolve(f"file://{tmp_path}/checkpoints/killable")
    metadata = CheckpointMetadata.from_bytes(resolved.metadata)
    assert metadata.properties[WATERMARK] == timer_watermark(epochs), "the last epoch's recorded watermark"
    reader = StatekitConf.parse({"backend": backend, "local.dir": str(tmp_path / "dump-local")}).create_backend()
    assert pending_windows(metadata, resolved.streams, reader, str(tmp_path / "dump")) == open_windows


def timer_watermark(epochs) -> int:
    """The watermark of the last of ``epochs``: the largest event time before it minus the delay."""
    return max(ts for rows in epochs[:-1] for _, ts in rows) - DELAY_MS


def pending_windows(metadata, streams, state_backend, local_dir):
    """(key, window end) -> count of every window whose event-time timer is pending in a checkpoint."""
    from statekit.checkpoint.assignment import assign
    from statekit.conformance_tests.base import open_keyed_backend
    from statekit.conformance_tests.timer_workload import WINDOW_COUNT
    from statekit.runtime.timers import USER_TIMERS, timer_state_name
    from statekit.serializers import Int64Serializer
    from statekit.spi.timers import TimeDomain

    operator = metadata.operator("keyed-process")
    found = {}
    for index in range(operator.parallelism):
        restore = assign(operator, index, operator.parallelism)
        backend = open_keyed_backend(state_backend, f"{local_dir}-{index}", subtask_index=index,
                                     parallelism=operator.parallelism, max_parallelism=operator.max_parallelism,
                                     restore_handles=restore.keyed, restore_streams=streams)
        try:
            counts = backend.get_state(WINDOW_COUNT, Int64Serializer())
            timers = backend.create_timer_queue(timer_state_name(USER_TIMERS, TimeDomain.EVENT_TIME))
            while (timer := timers.poll(1 << 62)) is not None:
                backend.set_current_key(timer.key, timer.key_group)
                counts.set_current_namespace(timer.timestamp)
                found[(timer.key, timer.timestamp)] = counts.value()
        finally:
            backend.dispose()
    return found
