"""What statekit reads of a streaming query's own Spark checkpoint (its ``checkpointLocation``),
through fsspec: the query id Spark keeps in ``metadata`` (``{"id": "<uuid>"}``, written when the
query first starts), which identifies the query across restarts, and the micro-batches Spark
committed: one file ``commits/<batchId>`` each, written after ``foreachBatch`` returned."""
from __future__ import annotations

import json
import posixpath
from typing import Any

from statekit.checkpoint.ownership import RunIdentity, streaming_query
from statekit.spi.errors import ConfigurationError
from statekit.storage.urls import open_url

LOCATION_ARGUMENT = "checkpoint_location"


class QueryCheckpoint:
    def __init__(self, location: str) -> None:
        self.location = location
        self.fs, self.path = open_url(location, LOCATION_ARGUMENT)
        self._query_id: str | None = None

    def identity(self) -> RunIdentity:
        """The query's identity; a query that never started yet has no id (it matches no other)."""
        query_id = self.query_id()
        if query_id is None:
            return RunIdentity("streaming-query", None, f"a new streaming query (checkpointLocation {self.location})")
        return streaming_query(query_id, self.location)

    def query_id(self) -> str | None:
        if self._query_id is None:
            data = self._read(posixpath.join(self.path, "metadata"))
            if data is not None:
                try:
                    self._query_id = str(json.loads(data)["id"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise ConfigurationError(f"{self.location}/metadata is not a Spark query checkpoint's metadata "
                                             f"({exc}); is {LOCATION_ARGUMENT} the query's checkpoint?") from exc
        return self._query_id

    def last_committed_batch(self) -> int | None:
        """The highest micro-batch id in the commit log, or None when none is committed."""
        directory = posixpath.join(self.path, "commits")
        try:
            names = [posixpath.basename(str(p).rstrip("/")) for p in self.fs.ls(directory, detail=False)]
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unreadable(directory, exc) from exc
        committed = [int(name) for name in names if name.isdigit()]
        return max(committed) if committed else None

    def batch_timestamp_ms(self, batch_id: int) -> int | None:
        """Spark's timestamp of micro-batch ``batch_id`` (``batchTimestampMs`` in its offset log
        entry ``offsets/<batchId>``, written before the batch runs), or None when unreadable."""
        data = self._read(posixpath.join(self.path, "offsets", str(batch_id)))
        if data is None:
            return None
        for line in data.decode("utf-8", "replace").splitlines():
            if '"batchTimestampMs"' in line:
                try:
                    return int(json.loads(line)["batchTimestampMs"])
                except (ValueError, KeyError, TypeError):
                    return None
        return None

    def _read(self, path: str) -> Any:
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unreadable(path, exc) from exc

    def _unreadable(self, path: str, exc: BaseException) -> ConfigurationError:
        return ConfigurationError(f"cannot read {path} of the query's Spark checkpoint ({type(exc).__name__}: {exc}); "
                                  f"statekit reads the query id and the commit log there to guard against restoring "
                                  f"older state than Spark committed: make {LOCATION_ARGUMENT}={self.location!r} "
                                  f"readable by the driver")
