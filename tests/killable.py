"""Helpers of the tests that kill a streaming query's driver: its source files, and a run of
``jobs/killable_stream.py`` as a process of its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from spark_processes import short_job_env

JOB = os.path.join(os.path.dirname(__file__), "jobs", "killable_stream.py")
WORKLOAD_COLUMNS = ("key", "category", "amount")


def write_micro_batches(work: Path, batches: Sequence[Sequence[tuple]], columns: Sequence[str] = WORKLOAD_COLUMNS) -> None:
    """One JSON file per micro-batch in ``work/source``; the file source takes them in order of
    modification time, so each gets a later one."""
    os.makedirs(work / "source")
    for i, rows in enumerate(batches):
        path = work / "source" / f"part-{i:03d}.json"
        with open(path, "w") as f:
            f.writelines(json.dumps(dict(zip(columns, row))) + "\n" for row in rows)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def run_killable(work: Path, backend: str, kill: str, *arguments: str) -> subprocess.CompletedProcess:
    """Run the job (``killable_stream.py WORK BACKEND KILL [JOB [SINK [MASTER]]]``) to its end or its kill."""
    env = short_job_env(PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, JOB, str(work), backend, kill, *arguments], env=env, capture_output=True,
                          text=True, timeout=600)
