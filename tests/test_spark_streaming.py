"""Streaming through foreachBatch: one checkpoint per micro-batch, and a micro-batch that Spark
replays after a restart leaves state identical to a failure-free run."""
import json
import os

import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import WorkloadFunction, dump_state, expected_key_state, make_rows, oracle
from statekit.spark import StatekitConf, process_keyed_stream
from statekit.storage.filesystem import resolve

pytestmark = pytest.mark.spark
SCHEMA = "key string, category string, amount long"


def _write_files(directory, epochs):
    os.makedirs(directory, exist_ok=True)
    for i, rows in enumerate(epochs):
        with open(os.path.join(directory, f"part-{i:03d}.json"), "w") as f:
            for key, category, amount in rows:
                f.write(json.dumps({"key": key, "category": category, "amount": amount}) + "\n")


def _start(spark, source, spark_checkpoint, seen, job_id):
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(source)

    def sink(out, batch_id):
        seen.append((batch_id, out.count()))

    return process_keyed_stream(stream, "key", WorkloadFunction(), "key string, count long", sink,
                                checkpoint_location=spark_checkpoint, job_id=job_id,
                                trigger={"availableNow": True})


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_micro_batches_checkpoint_and_a_replayed_batch_is_exactly_once(spark, statekit_settings, tmp_path, backend):
    statekit_settings({"backend": backend, "checkpoint.storage": "filesystem",
                       "checkpoint.dir": f"file://{tmp_path}/checkpoints", "checkpoint.incremental": "true",
                       "parallelism": "3", "local.dir": str(tmp_path / "local")})
    epochs = [make_rows(800, 200, seed) for seed in range(21, 25)]
    source = str(tmp_path / "source")
    _write_files(source, epochs)
    spark_checkpoint = str(tmp_path / "spark-checkpoint")
    seen = []
    job = f"stream-{backend}"
    _start(spark, source, spark_checkpoint, seen, job).awaitTermination(300)
    assert [b for b, _ in seen] == [0, 1, 2, 3] and all(n == 800 for _, n in seen), seen
    want = {k: expected_key_state(v) for k, v in oracle([r for e in epochs for r in e]).items()}

    def state_now():
        resolved = resolve(f"file://{tmp_path}/checkpoints/{job}")
        metadata = CheckpointMetadata.from_bytes(resolved.metadata)
        reader = StatekitConf.parse({"backend": backend, "local.dir": str(tmp_path / "dump-local")}).create_backend()
        return metadata.checkpoint_id, dump_state(metadata, resolved.streams, str(tmp_path / f"d{len(seen)}"),
                                                  state_backend=reader)

    checkpoint_id, found = state_now()
    assert checkpoint_id == 4 and found == want

    # Spark has not recorded micro-batch 3 as committed: a restart replays it
    for name in ("3", ".3.crc"):
        os.remove(os.path.join(spark_checkpoint, "commits", name))
    _start(spark, source, spark_checkpoint, seen, job).awaitTermination(300)
    assert [b for b, _ in seen][4:] == [3], f"micro-batch 3 was not replayed: {seen}"
    checkpoint_id, found = state_now()
    assert checkpoint_id == 4 and found == want, "the replayed micro-batch changed the state"
