"""The examples run and prove their results (each ends with an OK line or exits non-zero)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("example", ["local_demo.py", pytest.param("spark_demo.py", marks=pytest.mark.spark)])
def test_example_runs_and_checks_itself(example):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYSPARK_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    result = subprocess.run([sys.executable, str(ROOT / "examples" / example)], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK: all 500 sensors" in result.stdout, result.stdout[-2000:]
