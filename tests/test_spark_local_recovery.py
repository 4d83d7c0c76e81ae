"""Under Spark, a subtask's next epoch reuses the working state its previous epoch left on the
executor (reopened from local disk, or kept open by the same Python worker), and the job's state
is still exactly the oracle. Runs the workload as a ``KeyedBatchFunction``."""
import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import (
    WorkloadBatchFunction, dump_state, expected_key_state, make_rows, oracle,
)
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
