"""``spark.read.format("statekit-metadata")``: what checkpoints and savepoints hold, as a DataFrame.

::

    spark.read.format("statekit-metadata").load("s3://bucket/checkpoints/my-job")

``path`` (or ``checkpoint-dir`` + ``job`` [+ ``checkpoint-id``]) is a checkpoint directory, a job
directory (all its completed checkpoints), one checkpoint or a savepoint directory. One row per
snapshot, operator and state (keyed states by kind; operator states with kind ``operator-split``,
``operator-union`` or ``operator-broadcast``): the snapshot's id, path, time, backend, whether it is
incremental or a savepoint and its size; the operator's parallelism, max parallelism, size and key
serializer; the state's kind, TTL and serializers; and how each subtask recovered, the watermark
and the late rows the checkpoint recorded. The same facts as ``statekit checkpoints describe``.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from statekit.inspection import describe, list_checkpoints
from statekit.runtime.event_time import LATE_ROWS, LATE_ROWS_OUTPUT, WATERMARK
from statekit.spark.state_source import SnapshotLocation, snapshot_location_of
from statekit.spi.errors import RestoreError

NAME = "statekit-metadata"
SCHEMA = ("path string, checkpoint_id bigint, savepoint boolean, time timestamp, backend string, "
          "incremental boolean, snapshot_size bigint, operator_id string, parallelism int, max_parallelism int, "
          "operator_size bigint, key_serializer string, state string, kind string, ttl_seconds double, "
          "serializers map<string,string>, recovery map<string,string>, watermark_ms bigint, "
          "late_rows_dropped bigint, late_rows_side_output bigint, properties string")


def snapshot_paths(location: SnapshotLocation) -> list[str]:
    """The completed snapshots at ``location``, oldest first; a directory that holds no job,
    checkpoint or savepoint at all is refused."""
    listing = list_checkpoints(location.url, location.storage_options)
    if not listing["jobs"] and not listing["savepoints"]:
        raise RestoreError(f"format('{NAME}') path={location.url!r} is not a checkpoint directory: it holds no job "
                           f"directory (<job-id>/chk-<n>/_metadata), checkpoint (chk-<n>/_metadata) or savepoint "
                           f"(savepoint-<id>/_metadata). Give the checkpoint directory (spark.statekit.checkpoint.dir), "
                           f"a job directory in it, one chk-<n> directory or a savepoint directory")
    entries = [c for job in listing["jobs"] for c in job["checkpoints"]] + listing["savepoints"]
    return [entry["path"] for entry in entries if entry["status"] == "completed"]


def _serializer_name(doc: dict[str, Any] | None) -> str | None:
    return doc["class"] if doc else None


def metadata_rows(path: str, storage_options: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of one snapshot (``SCHEMA``)."""
    doc = describe(path, storage_options)
    properties = doc["properties"]
    recovery = properties.get("recovery")
    time = datetime.fromtimestamp(doc["timestamp"], timezone.utc) if doc["timestamp"] is not None else None
    snapshot = (doc["path"], doc["checkpoint_id"], doc["savepoint"], time, doc["backend"], doc["incremental"],
                doc["state_size"])
    recorded = ({str(k): str(v) for k, v in recovery.items()} if isinstance(recovery, dict) else None,
                properties.get(WATERMARK), properties.get(LATE_ROWS), properties.get(LATE_ROWS_OUTPUT),
                json.dumps(properties, sort_keys=True))
    for operator in doc["operators"]:
        head = (operator["operator_id"], operator["parallelism"], operator["max_parallelism"], operator["state_size"],
                _serializer_name(operator["key_serializer"]))
        for state in operator["states"]:
            serializers = {role: s["class"] for role, s in state["serializers"].items()}
            yield (*snapshot, *head, state["name"], state["kind"], state["ttl_seconds"], serializers, *recorded)
        for state in operator["operator_states"]:
            serializers = {role: s["class"] for role, s in state["serializers"].items()}
            yield (*snapshot, *head, state["name"], f"operator-{state['mode']}", None, serializers, *recorded)


class _Snapshot(InputPartition):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class _MetadataReader(DataSourceReader):
    def __init__(self, location: SnapshotLocation, paths: list[str]) -> None:
        self.location = location
        self.paths = paths

    def partitions(self) -> list[InputPartition]:
        return [_Snapshot(path) for path in self.paths]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        # no completed snapshot yet: Spark reads the one partition it makes of none, which holds nothing
        if isinstance(partition, _Snapshot):
            yield from metadata_rows(partition.path, self.location.storage_options)


class StatekitMetadataSource(DataSource):
    """``format("statekit-metadata")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.location = snapshot_location_of(dict(options), NAME)
        self.paths = snapshot_paths(self.location)  # at load(), on the driver, as format("statekit") resolves

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _MetadataReader(self.location, self.paths)
