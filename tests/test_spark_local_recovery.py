"""Under Spark, a subtask's next epoch reuses the working state its previous epoch left on the
executor (reopened from local disk, or kept open by the same Python worker), and the job's state
is still exactly the oracle. Runs the workload as a ``KeyedBatchFunction``."""
import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import (
    WorkloadBatchFunction, dump_state, expected_key_state, make_rows, oracle,
)
from statekit.runtime.local_recovery import job_scope
from statekit.spark import StatekitConf, process_keyed
from statekit.storage.pointers import resolve

pytestmark = pytest.mark.spark
SCHEMA = "key string, category string, amount long"
#: how a subtask may recover when its previous epoch ran on the same machine
REUSED = {"heap": {"parked", "storage"}, "rocksdb": {"local"}, "lmdb": {"local"}}


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_epochs_reuse_local_working_state(spark, statekit_settings, tmp_path, backend):
    checkpoints = f"file://{tmp_path}/checkpoints"
    statekit_settings({"backend": backend, "checkpoint.storage": "filesystem", "checkpoint.dir": checkpoints,
                       "checkpoint.incremental": "true", "parallelism": 2, "local.dir": str(tmp_path / "local")})
    job = f"local-recovery-{backend}"
    epochs = [make_rows(1200, 250, seed) for seed in (31, 32, 33)]
    recoveries = []
    for rows in epochs:
        out = process_keyed(spark.createDataFrame(rows, SCHEMA).coalesce(1), "key", WorkloadBatchFunction(),
                            "key string, count long", job_id=job).collect()
        assert len(out) == len(rows)
        resolved = resolve(f"{checkpoints}/{job}")
        recoveries.append(set(CheckpointMetadata.from_bytes(resolved.metadata).properties["recovery"].values()))
    assert recoveries[0] == {"fresh"}
    assert recoveries[1] <= REUSED[backend] and recoveries[2] <= REUSED[backend], recoveries
    metadata = CheckpointMetadata.from_bytes(resolved.metadata)
    found = dump_state(metadata, resolved.streams, str(tmp_path / "dump"),
                       state_backend=StatekitConf.parse({"backend": backend,
                                                         "local.dir": str(tmp_path / "d")}).create_backend())
    assert found == {k: expected_key_state(v) for k, v in oracle([r for e in epochs for r in e]).items()}


@pytest.mark.parametrize("backend", ["rocksdb"])
def test_streaming_epochs_reuse_local_state_across_a_rescale(spark, statekit_settings, tmp_path, backend):
    """A streaming query at parallelism 4, then restarted at 8: read through statekit-metadata, every
    steady micro-batch's subtasks reopened their local state; only the first one after the rescale
    read storage. Once an epoch at 8 completed, the slots of parallelism 4 are gone."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from statekit.spark import process_keyed_stream

    checkpoints, source, local = f"file://{tmp_path}/checkpoints", tmp_path / "source", tmp_path / "local"
    source.mkdir()
    job = f"streaming-local-recovery-{backend}"
    settings = {"backend": backend, "checkpoint.storage": "filesystem", "checkpoint.dir": checkpoints,
                "checkpoint.incremental": "true", "checkpoint.num-retained": "10", "local.dir": str(local)}
    files = 0
    for parallelism in (4, 8):
        statekit_settings({**settings, "parallelism": parallelism})
        for _ in range(3):  # one micro-batch per file
            files += 1
            key, category, amount = zip(*make_rows(400, 100, 40 + files))
            pq.write_table(pa.table({"key": key, "category": category, "amount": amount}),
                           source / f"part-{files}.parquet")
        stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
        process_keyed_stream(stream, "key", WorkloadBatchFunction(), "key string, count long",
                             sink=lambda output, batch_id: output.count(), checkpoint_location=str(tmp_path / "query"),
                             job_id=job, trigger={"availableNow": True}).awaitTermination()
    rows = spark.read.format("statekit-metadata").load(f"{checkpoints}/{job}").collect()
    recovered = {r.checkpoint_id: (r.parallelism, set(r.recovery.values()), len(r.recovery)) for r in rows}
    assert recovered == {1: (4, {"fresh"}, 4), 2: (4, {"local"}, 4), 3: (4, {"local"}, 4),
                         4: (8, {"storage"}, 8), 5: (8, {"local"}, 8), 6: (8, {"local"}, 8)}
    scope = job_scope("filesystem", checkpoints, {}, durable=True)
    assert sorted(p.name for p in (local / job / "keyed-process").iterdir()) == sorted(
        f"{backend}-{scope}-subtask-{i}-of-8-max-128" for i in range(8))


def test_two_jobs_of_one_id_checkpointing_elsewhere_each_reuse_their_own_local_state(spark, statekit_settings, tmp_path):
    """Two RocksDB jobs with the same job id, each checkpointing to its own directory, take turns on
    one machine and one local directory (as two queries of a test campaign with the default local
    directory do). Each reuses its own working state: read through statekit-metadata, every epoch
    after the first is `local`. They shared one slot per subtask before: each found the other's state
    there, and every epoch of both restored from storage, also after a rescale; and a rescale of one
    removed the other's slots."""
    job, local = "one-id-two-places", str(tmp_path / "local")

    def run(place, parallelism, seed):
        statekit_settings({"backend": "rocksdb", "checkpoint.storage": "filesystem",
                           "checkpoint.dir": f"file://{tmp_path}/{place}", "checkpoint.incremental": "true",
                           "checkpoint.num-retained": "10", "parallelism": parallelism, "local.dir": local})
        rows = make_rows(300, 80, seed)
        out = process_keyed(spark.createDataFrame(rows, SCHEMA).coalesce(1), "key", WorkloadBatchFunction(),
                            "key string, count long", job_id=job).collect()
        assert len(out) == len(rows)

    for seed, (place, parallelism) in enumerate([("a", 2), ("b", 2), ("a", 2), ("b", 2), ("a", 3), ("a", 3),
                                                 ("b", 2)]):
        run(place, parallelism, 60 + seed)
    recovered = {place: {r.checkpoint_id: (r.parallelism, set(r.recovery.values())) for r in spark.read.format(
        "statekit-metadata").load(f"file://{tmp_path}/{place}/{job}").collect()} for place in ("a", "b")}
    assert recovered == {"a": {1: (2, {"fresh"}), 2: (2, {"local"}), 3: (3, {"storage"}), 4: (3, {"local"})},
                         "b": {1: (2, {"fresh"}), 2: (2, {"local"}), 3: (2, {"local"})}}
