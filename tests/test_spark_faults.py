"""A task that fails mid-epoch is retried by Spark, and the epoch's state is still exactly the
failure-free oracle: the retry restores from the same checkpoint and replaces the failed attempt."""
import os

import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import (
    FailOnce, WorkloadFunction, dump_state, expected_key_state, make_rows, oracle,
)
from statekit.spark import process_keyed
from statekit.storage.filesystem import resolve

pytestmark = pytest.mark.spark
SCHEMA = "key string, category string, amount long"


@pytest.mark.parametrize("after_rows", [50, None], ids=["mid-processing", "after-upload"])
def test_failed_task_is_retried_and_state_matches_the_oracle(spark, statekit_settings, tmp_path, after_rows):
    statekit_settings({"backend": "rocksdb", "checkpoint.storage": "filesystem",
                       "checkpoint.dir": f"file://{tmp_path}/checkpoints", "checkpoint.incremental": "true",
                       "parallelism": "2", "local.dir": str(tmp_path / "local")})
    epochs = [make_rows(1000, 300, seed) for seed in (61, 62)]
    job = "faults"
    ordered = [spark.createDataFrame(rows, SCHEMA).coalesce(1) for rows in epochs]  # rows in oracle order
    process_keyed(ordered[0], "key", WorkloadFunction(), "key string, count long", job_id=job)
    marker = str(tmp_path / "failed-once")
    out = process_keyed(ordered[1], "key", FailOnce(marker, after_rows),
                        "key string, count long", job_id=job).collect()
    assert os.path.exists(marker), "the failure was not injected"
    assert len(out) == len(epochs[1]), "the retried task's output replaces the failed attempt's"
    resolved = resolve(f"file://{tmp_path}/checkpoints/{job}")
    metadata = CheckpointMetadata.from_bytes(resolved.metadata)
    assert metadata.checkpoint_id == 2
    from statekit.backends.rocksdb import RocksDBStateBackend
    found = dump_state(metadata, resolved.streams, str(tmp_path / "dump"),
                       state_backend=RocksDBStateBackend(**{"local-dir": str(tmp_path / "d")}))
    assert found == {k: expected_key_state(v) for k, v in oracle(epochs[0] + epochs[1]).items()}
