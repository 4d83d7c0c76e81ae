"""A streaming query whose driver is killed (SIGKILL) and started again from its Spark
checkpoint leaves exactly the state and output of a failure-free run: killed after statekit
committed an epoch but before Spark committed the micro-batch (Spark replays it), and killed
while a task was processing (that epoch's checkpoint never completed)."""
import json
import os
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import dump_state, expected_outputs, expected_state, make_rows
from statekit.runtime.task import PROCESSING_TIME
from statekit.spark import StatekitConf
from statekit.spark.query_checkpoint import QueryCheckpoint
from statekit.storage.pointers import resolve

pytestmark = [pytest.mark.spark, pytest.mark.slow]
JOB = os.path.join(os.path.dirname(__file__), "jobs", "killable_stream.py")
BATCHES = 4


def _run(work, backend, kill):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, JOB, str(work), backend, kill], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("backend,kill", [("rocksdb", "sink:2"), ("heap", "task:2")])
def test_killed_query_restarts_exactly_once(tmp_path, backend, kill):
    epochs = [make_rows(600, 150, seed) for seed in range(41, 41 + BATCHES)]
    os.makedirs(tmp_path / "source")
    for i, rows in enumerate(epochs):
        path = tmp_path / "source" / f"part-{i:03d}.json"
        with open(path, "w") as f:
            f.writelines(json.dumps({"key": k, "category": c, "amount": a}) + "\n" for k, c, a in rows)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # the file source takes files by mtime
    killed = _run(tmp_path, backend, kill)
    assert killed.returncode == -signal.SIGKILL, f"the driver was not killed:\n{killed.stderr[-3000:]}"
    restarted = _run(tmp_path, backend, "none")
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
