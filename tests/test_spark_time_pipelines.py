"""The event-time pipelines of ``examples/time_pipelines.py`` (hourly average per sensor, an alert
for two readings a minute apart, user sessions) under Spark on every backend, each epoch's output
compared with the plain-Python recomputation: through a task that fails and is retried, a new run
per epoch (each restores the previous epoch's checkpoint), a rescale 4 -> 3 -> 8, and a switch to
another backend through a savepoint taken while windows, sessions and timers are pending."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from statekit.conformance_tests.compare import assert_same_rows
from statekit.runtime.function import KeyedProcessFunction
from statekit.spark import process_keyed, savepoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import time_pipelines as tp  # noqa: E402

pytestmark = pytest.mark.spark

PIPELINES = {
    "hourly": (tp.hourly_average, "sensor", tp.READINGS, tp.HOURLY_OUTPUT, tp.expected_hourly,
               lambda: tp.sensor_epochs(5, 200) + tp.closing_epochs("s00")),
    "alerts": (tp.JumpAlert, "sensor", tp.READINGS, tp.ALERT_OUTPUT, tp.expected_alerts,
               lambda: tp.sensor_epochs(7, 200, seed=5)),
    "sessions": (tp.user_sessions, "user", tp.EVENTS, tp.SESSION_OUTPUT, tp.expected_sessions,
                 lambda: tp.click_epochs(5, 150) + tp.closing_epochs("u00")),
}
SWITCH = {"heap": "rocksdb", "rocksdb": "heap", "lmdb": "heap", "sqlite": "lmdb"}


@pytest.fixture(autouse=True, scope="module")
def _pickle_the_examples_by_value():
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(tp)  # executors need not import the example module
    yield
    cloudpickle.unregister_pickle_by_value(tp)


def failing_once(inner: KeyedProcessFunction, marker: str) -> KeyedProcessFunction:
    """``inner``, whose subtask 1 fails at its first row once (defined in a function: Spark's
    workers get the class by value); Spark retries the task."""

    class FailingOnce(KeyedProcessFunction):
        judges_lateness = inner.judges_lateness  # a window gets the rows behind the watermark too

        def open(self, ctx):
            self.subtask = ctx.subtask_index
            inner.open(ctx)

        def process(self, row, ctx):
            if self.subtask == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("injected task failure")
            return inner.process(row, ctx)

        def on_timer(self, timestamp, ctx):
            return inner.on_timer(timestamp, ctx)

        def close(self):
            inner.close()

    return FailingOnce()


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb", "sqlite"])
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_a_pipeline_survives_failure_restarts_rescales_and_a_backend_switch(spark, statekit_settings, tmp_path,
                                                                            backend, pipeline):
    build, key, schema, output, oracle, epochs_of = PIPELINES[pipeline]
    epochs = epochs_of()
    expected = oracle(epochs)
    settings = {"backend": backend, "checkpoint.storage": "filesystem", "parallelism": 4,
                "checkpoint.dir": (tmp_path / "checkpoints").as_uri(),
                "savepoint.dir": (tmp_path / "savepoints").as_uri()}
    statekit_settings(settings)
    job = f"{pipeline}-{backend}"
    marker = tmp_path / "failed-once"
    for number, rows in enumerate(epochs):
        function = failing_once(build(), str(marker)) if number == 1 else build()
        if number == 2:
            statekit_settings({**settings, "parallelism": 3})
        if number == 3:
            statekit_settings({**settings, "parallelism": 8})
        if number == 4:  # pending windows, sessions and timers move to another backend
            url = savepoint(spark, job)
            job = f"{job}-switched"
            statekit_settings({**settings, "backend": SWITCH[backend], "parallelism": 3, "restore.path": url})
        df = spark.createDataFrame(rows, schema)
        found = process_keyed(df, key, function, output, job_id=job, event_time="ts",
                              watermark_delay=tp.WATERMARK_DELAY, processing_time_ms=tp.T0 + number).collect()
        assert_same_rows([tuple(row) for row in found], expected[number],
                         f"{pipeline} on {backend}, epoch {number + 1}")
    assert marker.exists(), "the injected failure happened"
    assert sum(map(len, expected)) >= 10, "the pipeline emitted too little to prove anything"
