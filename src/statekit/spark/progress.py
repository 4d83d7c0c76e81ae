"""statekit's metrics in a streaming query's progress.

Spark fills ``StreamingQueryProgress`` in the JVM from the micro-batch's own plan; what a
``foreachBatch`` function computes never reaches it. So ``process_keyed_stream`` returns its
query as a ``StatekitStreamingQuery``: a ``StreamingQuery`` (classic or Spark Connect) whose
``lastProgress`` and ``recentProgress`` carry, in ``observedMetrics["statekit"]``, a ``Row`` of
the epoch's metrics (``EpochMetrics.flat``) for every micro-batch statekit ran. They come from an
in-process buffer the micro-batches fill on a classic session, else (Spark Connect, whose
micro-batches run in a process of the server) from the metrics recorded with the checkpoint.
Spark's own progress objects, the Spark UI and JVM listeners do not show them.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Optional

from pyspark.sql import Row
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from statekit.runtime.metrics import EpochMetrics

#: the key of statekit's metrics in ``StreamingQueryProgress.observedMetrics``
METRICS_KEY = "statekit"
#: micro-batches whose metrics the buffer keeps (Spark's ``numRecentProgressUpdates`` default)
BUFFERED_BATCHES = 100


class MetricsBuffer:
    """The metrics of a query's latest micro-batches, by batch id; ``lookup`` finds older ones
    (or all of them where the micro-batches run in another process)."""

    def __init__(self, lookup: Callable[[int], EpochMetrics | None]) -> None:
        self._lookup = lookup
        #: by batch id; None: a batch Spark reported whose metrics were looked up and not found
        #: (metrics off, or past retention: they never appear later), so that polling progress reads
        #: storage once per batch
        self._batches: OrderedDict[int, EpochMetrics | None] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, batch_id: int, metrics: EpochMetrics | None) -> None:
        with self._lock:
            self._batches[batch_id] = metrics
            self._batches.move_to_end(batch_id)
            while len(self._batches) > BUFFERED_BATCHES:
                self._batches.popitem(last=False)

    def get(self, batch_id: int, reported: bool = False) -> EpochMetrics | None:
        """The metrics of micro-batch ``batch_id``; ``reported``: Spark reported it finished, so
        metrics not found now are never found (and not looked for again)."""
        with self._lock:
            known = batch_id in self._batches
            found = self._batches.get(batch_id)
        if not known:
            found = self._lookup(batch_id)
            if found is not None or reported:
                self.put(batch_id, found)
        return found

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with the micro-batch function (Spark Connect): without its lock and contents."""
        return {"_lookup": self._lookup}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_lookup"])  # type: ignore[misc]


class StatekitStreamingQuery:
    """Mixed into the class of the query Spark returned (``with_metrics``): it stays a
    ``StreamingQuery`` of its kind (classic or Connect)."""

    _statekit_metrics: MetricsBuffer

    @property
    def lastProgress(self) -> Optional[StreamingQueryProgress]:
        return self._statekit_progress(super().lastProgress)  # type: ignore[misc]

    @property
    def recentProgress(self) -> list[StreamingQueryProgress]:
        return [self._statekit_progress(p) for p in super().recentProgress]  # type: ignore[misc]

    def statekit_metrics(self, batch_id: int) -> EpochMetrics | None:
        """Micro-batch ``batch_id``'s metrics (per subtask and in total); None where it has none."""
        return self._statekit_metrics.get(batch_id)

    def _statekit_progress(self, progress: Any) -> Any:
        if progress is None or "durationMs" in progress and "addBatch" not in progress["durationMs"]:
            return progress  # no progress yet, or a trigger that ran no micro-batch
        metrics = self._statekit_metrics.get(progress["batchId"], reported=True)
        if metrics is not None:
            progress["observedMetrics"][METRICS_KEY] = Row(**metrics.flat())
        return progress


_CLASSES: dict[type, type] = {}


def with_metrics(query: StreamingQuery, buffer: MetricsBuffer) -> StreamingQuery:
    """``query`` as a ``StatekitStreamingQuery`` of its own class (classic or Connect): the same
    object's state, whose progress carries statekit's metrics."""
    base = type(query)
    cls = _CLASSES.get(base)
    if cls is None:
        cls = _CLASSES[base] = type(f"Statekit{base.__name__}", (StatekitStreamingQuery, base), {})
    wrapped = object.__new__(cls)
    wrapped.__dict__.update(query.__dict__)
    wrapped._statekit_metrics = buffer
    return wrapped
