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

Option ``table`` picks other rows: ``states`` (the default, above); ``history``, one row per
checkpoint of each job's history (``statekit checkpoints history``); ``key_groups``, one row per
snapshot, operator and key group with its state bytes (``statekit state skew``).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from statekit.history import checkpoint_history
from statekit.inspection import describe, list_checkpoints
from statekit.runtime.metrics import HISTORY_LENGTH
from statekit.skew import key_group_bytes
from statekit.runtime.event_time import LATE_ROWS, LATE_ROWS_OUTPUT, WATERMARK
from statekit.spark.state_source import SnapshotLocation, snapshot_location_of
from statekit.spi.errors import ConfigurationError, RestoreError

NAME = "statekit-metadata"
SCHEMA = ("path string, checkpoint_id bigint, savepoint boolean, time timestamp, backend string, "
          "incremental boolean, snapshot_size bigint, operator_id string, parallelism int, max_parallelism int, "
          "operator_size bigint, key_serializer string, state string, kind string, ttl_seconds double, "
          "serializers map<string,string>, recovery map<string,string>, watermark_ms bigint, "
          "late_rows_dropped bigint, late_rows_side_output bigint, properties string")
HISTORY_SCHEMA = ("job_id string, checkpoint_id bigint, time timestamp, duration_ms double, bytes_written bigint, "
                  "bytes_written_full bigint, bytes_written_incremental bigint, bytes_reused bigint, "
                  "state_size bigint, kind string, parallelism int, restore_sources map<string,int>, "
                  "rows_in bigint, rows_out bigint, state_entries bigint, state_entries_exact boolean, "
                  "live_state_bytes bigint, timers_pending bigint")
KEY_GROUPS_SCHEMA = ("path string, checkpoint_id bigint, operator_id string, key_group int, subtask int, "
                     "bytes bigint, exact boolean")


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


def history_rows(job_path: str, storage_options: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of one job's history (``HISTORY_SCHEMA``)."""
    doc = checkpoint_history(job_path, None, HISTORY_LENGTH + 1, storage_options)
    for row in doc["checkpoints"]:
        time = datetime.fromisoformat(row["time"]) if row["time"] else None
        yield (doc["job_id"], row["checkpoint_id"], time, row["duration_ms"], row["bytes_written"],
               row["bytes_written_full"], row["bytes_written_incremental"], row["bytes_reused"], row["state_size"],
               row["kind"], row["parallelism"], row["restore_sources"], row["rows_in"], row["rows_out"],
               row["state_entries"], row["state_entries_exact"], row["live_state_bytes"], row["timers_pending"])


def key_group_rows(path: str, storage_options: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of one snapshot's key groups, operator by operator (``KEY_GROUPS_SCHEMA``)."""
    for operator in describe(path, storage_options)["operators"]:
        doc = key_group_bytes(path, operator["operator_id"], 1, storage_options)
        for group in doc["key_groups"]:
            yield (doc["path"], doc["checkpoint_id"], doc["operator_id"], group["key_group"], group["subtask"],
                   group["bytes"], group["exact"])


#: option ``table``: its schema and the rows of one partition (a snapshot's path, or a job's for ``history``)
TABLES = {"states": (SCHEMA, metadata_rows), "history": (HISTORY_SCHEMA, history_rows),
          "key_groups": (KEY_GROUPS_SCHEMA, key_group_rows)}


class _Snapshot(InputPartition):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class _MetadataReader(DataSourceReader):
    def __init__(self, location: SnapshotLocation, paths: list[str], table: str) -> None:
        self.location = location
        self.paths = paths
        self.table = table

    def partitions(self) -> list[InputPartition]:
        return [_Snapshot(path) for path in self.paths]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        # no completed snapshot yet: Spark reads the one partition it makes of none, which holds nothing
        if isinstance(partition, _Snapshot):
            yield from TABLES[self.table][1](partition.path, self.location.storage_options)


class StatekitMetadataSource(DataSource):
    """``format("statekit-metadata")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.table = options.get("table", "states")
        if self.table not in TABLES:
            raise ConfigurationError(f"format('{NAME}') option table={self.table!r} is not a table: choose one of "
                                     f"{sorted(TABLES)}")
        self.location = snapshot_location_of(dict(options), NAME, ("table",))
        self.paths = snapshot_paths(self.location)  # at load(), on the driver, as format("statekit") resolves
        if self.table == "history":
            self.paths = [job["path"] for job in list_checkpoints(self.location.url, self.location.storage_options)
                          ["jobs"] if any(c["status"] == "completed" for c in job["checkpoints"])]

    def schema(self) -> str:
        return TABLES[self.table][0]

    def reader(self, schema: StructType) -> DataSourceReader:
        return _MetadataReader(self.location, self.paths, self.table)
