"""The examples run and prove their results (each ends with an OK line or exits non-zero)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("example,master,ok", [
    ("local_demo.py", None, "OK: all 500 sensors"),
    pytest.param("spark_demo.py", "local[2]", "OK: all 500 sensors", marks=pytest.mark.spark),
    # separate executor processes: pickling, executor-local RocksDB and checkpoint files across JVMs
    pytest.param("spark_demo.py", "local-cluster[2,1,1024]", "OK: all 500 sensors", marks=pytest.mark.spark),
    pytest.param("windows_demo.py", None, "OK: every micro-batch's hourly averages and alerts match",
                 marks=pytest.mark.spark),
    pytest.param("inspect_state.py", None, "OK: state read back as written", marks=pytest.mark.spark),
    pytest.param("exactly_once.py", None, "OK: every output row exactly once", marks=pytest.mark.spark),
], ids=["local-runner", "spark-local", "spark-local-cluster", "windows", "inspect-state", "exactly-once"])
def test_example_runs_and_checks_itself(example, master, ok):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", **({"STATEKIT_DEMO_MASTER": master} if master else {})}
    result = subprocess.run([sys.executable, str(ROOT / "examples" / example)], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert ok in result.stdout, result.stdout[-2000:]
