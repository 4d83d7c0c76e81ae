"""Draw the pictures of docs/observability.md again, from the jobs its tests check.

    python scripts/observability_images.py

Runs, on the local runner in a temporary directory, the jobs of ``tests/test_checkpoint_history.py``
(six incremental RocksDB checkpoints rescaled from 2 to 4 subtasks; one epoch of a job with one hot
key) and draws them with ``statekit checkpoints history --plot`` and ``statekit state skew --plot``
into ``docs/images`` (needs the ``plot`` extra: matplotlib).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from statekit.cli import main  # noqa: E402
from test_checkpoint_history import rescaled_incremental_job, skewed_job  # noqa: E402

IMAGES = ROOT / "docs" / "images"


def draw() -> None:
    with tempfile.TemporaryDirectory() as work:
        history, skewed = (Path(work) / "history").as_uri(), (Path(work) / "skewed").as_uri()
        rescaled_incremental_job(history)
        skewed_job(skewed)
        for command in (["checkpoints", "history", history, "--job", "history",
                         "--plot", str(IMAGES / "checkpoint-history.png")],
                        ["state", "skew", f"{skewed}/skewed", "--top", "5",
                         "--plot", str(IMAGES / "key-group-skew.png")]):
            if main(command) != 0:
                raise SystemExit(f"statekit {' '.join(command[:2])} failed")


if __name__ == "__main__":
    draw()
