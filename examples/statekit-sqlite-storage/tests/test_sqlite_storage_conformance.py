"""The sqlite storage through statekit's one command, as its author runs it: every level of the
conformance suite, each test on a fresh database file from the storage's test support, and no
storage test skipped but the durability tests, which watch Python's file calls while SQLite
writes through its own (its journal and synchronous setting make it durable)."""
import os
import re
import subprocess
import sys

import pytest


@pytest.mark.spark
def test_the_one_command_passes_every_level_without_skipping_a_storage_test(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "statekit.conformance_tests", "--backend", "heap", "--storage", "sqlite",
         "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, capture_output=True, text=True,
        timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "storage: sqlite (statekit_sqlite_storage.storage.SQLiteCheckpointStorage)" in output, output[-4000:]
    storage = re.search(r"^storage\s+(\d+)\s+(\d+)\s+(\d+)\s*$", output, re.MULTILINE)
    assert storage is not None, output[-4000:]
    passed, failed, skipped = map(int, storage.groups())
    assert passed >= 40 and failed == 0, f"storage level: {storage.group(0)}\n{output[-4000:]}"
    reasons = re.findall(r"^\s+storage\s+(\d+)\s+(.*)$", output.split("by reason:", 1)[-1], re.MULTILINE)
    assert sum(int(count) for count, _ in reasons) == skipped, output[-4000:]
    unexpected = [reason for _, reason in reasons if "through code the suite cannot watch" not in reason]
    assert skipped <= 2 and not unexpected, f"storage tests skipped: {unexpected}\n{output[-4000:]}"
    spark = re.search(r"^spark\s+(\d+)\s+0\s+(\d+)\s*$", output, re.MULTILINE)
    assert spark is not None and int(spark.group(1)) > 0 and int(spark.group(2)) == 0, output[-4000:]
