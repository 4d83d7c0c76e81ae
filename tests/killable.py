"""Helpers of the tests that kill a driver: a streaming query's source files and a run of
``jobs/killable_stream.py``, or a bounded epoch run by ``jobs/bounded_epoch.py``, each as a
process of its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from spark_processes import short_job_env

JOB = os.path.join(os.path.dirname(__file__), "jobs", "killable_stream.py")
BOUNDED_JOB = os.path.join(os.path.dirname(__file__), "jobs", "bounded_epoch.py")
WORKLOAD_COLUMNS = ("key", "category", "amount")


def write_micro_batches(work: Path, batches: Sequence[Sequence[tuple]], columns: Sequence[str] = WORKLOAD_COLUMNS,
                        start: int = 0) -> None:
    """One JSON file per micro-batch in ``work/source``; the file source takes them in order of
    modification time, so each gets a later one. ``start``: the number of the first (files added
    to a source that has ``start`` of them)."""
    os.makedirs(work / "source", exist_ok=start > 0)
    for i, rows in enumerate(batches, start):
        path = work / "source" / f"part-{i:03d}.json"
        with open(path, "w") as f:
            f.writelines(json.dumps(dict(zip(columns, row))) + "\n" for row in rows)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def job_env() -> dict[str, str]:
    """A job process's environment: quick JVMs, and this interpreter's import path (the tests' too)."""
    return short_job_env(PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def run_killable(work: Path, backend: str, kill: str, *arguments: str) -> subprocess.CompletedProcess:
    """Run the job (``killable_stream.py WORK BACKEND KILL [JOB [SINK [MASTER]]]``) to its end or its kill."""
    return subprocess.run([sys.executable, JOB, str(work), backend, kill, *arguments], env=job_env(),
                          capture_output=True, text=True, timeout=600)


def run_bounded_epoch(work: Path, job_id: str, rows: Sequence[tuple], kill: str,
                      settings: Mapping[str, object]) -> tuple[subprocess.CompletedProcess, list[tuple[str, int]]]:
    """Run ``rows`` as job ``job_id``'s next epoch in a driver of its own with ``spark.statekit.*``
    ``settings`` (``KILL``: ``none`` or ``after-commit``); returns the process and its output rows."""
    rows_file, output_file = work / f"rows-{uuid.uuid4().hex[:8]}.json", work / f"output-{uuid.uuid4().hex[:8]}.json"
    rows_file.write_text(json.dumps([list(row) for row in rows]))
    done = subprocess.run([sys.executable, BOUNDED_JOB, str(rows_file), str(output_file), job_id, kill,
                           *(f"{name}={value}" for name, value in settings.items())],
                          env=job_env(), capture_output=True, text=True, timeout=600)
    output = [(key, count) for key, count in json.loads(output_file.read_text())] if output_file.exists() else []
    return done, output
