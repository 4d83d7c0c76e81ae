"""An epoch's output, computed once: ``localCheckpoint(eager=True)`` truncates the stage's lineage,
so reading the output never runs the subtasks (and their snapshots) again.

On a Spark Connect session the checkpointed DataFrame is a plan whose finalizer (``__del__``)
releases the server's cached copy with a blocking gRPC call. PySpark 4.x makes that call wherever
the finalizer runs, and at interpreter exit it never returns: a client script that leaves such a
DataFrame alive and does not call ``spark.stop()`` hangs when it ends. statekit keeps a weak
reference to the plans of its results and, at exit (``atexit``, before the interpreter's final
collection), marks them released without a call; the server drops them with the session. A result
the program drops before it exits is released by PySpark as usual.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any

from pyspark.sql import DataFrame

from statekit.spark.session import is_connect

#: the attribute of PySpark's Connect plan for a cached relation whose value its finalizer
#: releases on the server (None: nothing to release)
_RELATION_ID = "_relation_id"

_plans: "weakref.WeakSet[Any]" = weakref.WeakSet()
_hook_lock = threading.Lock()
_hook_registered = False


def materialized(df: DataFrame) -> DataFrame:
    """``df`` computed now, once; its rows are kept by Spark until the result is dropped."""
    result = df.localCheckpoint(eager=True)
    if is_connect(df.sparkSession):
        _release_at_exit(getattr(result, "_plan", None))
    return result


def _release_at_exit(plan: Any) -> None:
    global _hook_registered
    if plan is None or getattr(plan, _RELATION_ID, None) is None:
        return
    _plans.add(plan)
    with _hook_lock:
        if not _hook_registered:
            atexit.register(forget_at_exit)
            _hook_registered = True


def forget_at_exit() -> None:
    """Mark every live plan of statekit's results released, without a call to the server, so that
    no finalizer makes one while the interpreter shuts down."""
    for plan in list(_plans):
        setattr(plan, _RELATION_ID, None)
    _plans.clear()
