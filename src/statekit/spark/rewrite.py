"""Offline state rewrites under Spark (``runtime.rewrite``): each subtask of the savepoint is
rewritten in a Spark task of its own, so the state rewritten may be larger than one process
holds; the driver commits the new savepoint once every subtask wrote its files."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

from statekit.checkpoint.metadata import CheckpointMetadata, SubtaskState, read_metadata
from statekit.checkpoint.signing import signing
from statekit.runtime.rewrite import StateRewrite, commit_rewrite, rewrite_subtask, rewritten_operator
from statekit.spark.conf import PREFIX, StatekitConf
from statekit.spi.errors import ConfigurationError, SnapshotError
from statekit.spi.handles import cryptographic_checksums
from statekit.spi.serializer import trusting


def rewrite_savepoint(spark: SparkSession, source: str, rewrite: StateRewrite, savepoint_id: str,
                      savepoint_dir: str | None = None, conf: StatekitConf | None = None) -> str:
    """Write ``source`` (a savepoint URL) rewritten as ``savepoint-<savepoint_id>`` in
    ``savepoint_dir`` (default: ``spark.statekit.savepoint.dir``); returns its URL. A transform holds
    each subtask's state in the job's backend (``spark.statekit.backend``)."""
    conf = conf or StatekitConf.from_spark(spark.conf)
    directory = savepoint_dir or conf.savepoint_dir
    if not directory:
        raise ConfigurationError(f"rewrite_savepoint needs savepoint_dir= or {PREFIX}savepoint.dir (a directory URL)")
    storage = conf.create_storage()
    with signing(conf.signing_secret) as signed, trusting(conf.trust_pickle):
        resolved = storage.resolve_checkpoint(source, "source")
        metadata = read_metadata(resolved.metadata, resolved.pointer)
        operator = rewritten_operator(metadata, rewrite)
        backend = conf.create_backend()
        location = storage.savepoint_location(directory, savepoint_id)
        trusted, local_dir, body = signed or conf.trust_pickle, conf.local_dir, metadata.to_bytes()

        def rewrite_subtasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            """On an executor (it captures no secret: the metadata's signature was checked here)."""
            on_executor = CheckpointMetadata.from_bytes(body, source)
            if local_dir:
                os.makedirs(local_dir, exist_ok=True)
            streams = storage.resolve_checkpoint(source, "source").streams
            for batch in batches:
                for index in batch.column("id").to_pylist():
                    with cryptographic_checksums(signed), trusting(trusted), \
                            tempfile.TemporaryDirectory(prefix="statekit-rewrite-", dir=local_dir) as work:
                        state = rewrite_subtask(on_executor, on_executor.operator(operator.operator_id), index, streams,
                                                rewrite, location.streams, backend, work)
                    yield pa.RecordBatch.from_pylist([{"subtask": index, "state": json.dumps(state.to_json())}])

        try:
            rows = spark.range(operator.parallelism, numPartitions=operator.parallelism) \
                .mapInArrow(rewrite_subtasks, "subtask long, state string").collect()
            states = {row["subtask"]: SubtaskState.from_json(json.loads(row["state"])) for row in rows}
            if sorted(states) != list(range(operator.parallelism)):
                raise SnapshotError(f"rewrite of {source}: only subtasks {sorted(states)} of {operator.parallelism} "
                                    f"wrote their state")
            _, pointer = commit_rewrite(location, metadata, operator, [states[i] for i in range(operator.parallelism)])
        except BaseException:
            location.discard()
            raise
    return pointer.external_pointer
