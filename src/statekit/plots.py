"""Pictures of a job's checkpoints, drawn with matplotlib (the ``plot`` extra): the checkpoint
history (``history_figure``) and state bytes per key group (``skew_figure``)."""
from __future__ import annotations

import math
from typing import Any

from statekit.inspection import InspectionError


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise InspectionError("--plot draws with matplotlib, which is not installed: pip install 'statekit[plot]'") \
            from exc
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def history_figure(doc: dict[str, Any]) -> Any:
    """Sizes (the checkpoint's, the state's in the backends, bytes written full or incremental) and
    durations per checkpoint, rescales marked."""
    plt = _pyplot()
    rows = doc["checkpoints"]
    ids = [row["checkpoint_id"] for row in rows]
    figure, (sizes, durations) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    sizes.plot(ids, [row["state_size"] or 0 for row in rows], marker="o", color="black", label="checkpoint size")
    if any(row.get("live_state_bytes") is not None for row in rows):
        sizes.plot(ids, [row.get("live_state_bytes") or 0 for row in rows], marker=".", linestyle="--", color="gray",
                   label="state in the backends (estimated)")
    for kind, color in (("full", "tab:blue"), ("incremental", "tab:orange")):
        chosen = [row for row in rows if row["kind"] == kind]
        sizes.bar([row["checkpoint_id"] for row in chosen], [row["bytes_written"] or 0 for row in chosen],
                  color=color, alpha=0.7, label=f"bytes written ({kind})")
    sizes.set_ylabel("bytes")
    sizes.legend(loc="upper left")
    sizes.set_title(f"checkpoints of job {doc['job_id']}")
    durations.plot(ids, [row["duration_ms"] for row in rows], marker="o", color="tab:green", label="epoch")
    durations.set_ylabel("duration (ms)")
    durations.set_xlabel("checkpoint id")
    for before, row in zip(rows, rows[1:]):
        if before["parallelism"] and row["parallelism"] and before["parallelism"] != row["parallelism"]:
            for axis in (sizes, durations):
                axis.axvline(row["checkpoint_id"] - 0.5, color="red", linestyle="--")
            sizes.annotate(f"rescale {before['parallelism']}->{row['parallelism']}", (row["checkpoint_id"] - 0.5, 0),
                           xycoords=("data", "axes fraction"), color="red", rotation=90, va="bottom", ha="right")
    figure.tight_layout()
    return figure


def skew_figure(doc: dict[str, Any]) -> Any:
    """State bytes per key group as a grid (key groups in order, row by row), the hottest annotated."""
    plt = _pyplot()
    groups = doc["key_groups"]
    width = max(1, math.ceil(math.sqrt(len(groups))))
    height = math.ceil(len(groups) / width)
    grid = [[math.nan] * width for _ in range(height)]
    for position, group in enumerate(groups):
        grid[position // width][position % width] = group["bytes"]
    figure, axis = plt.subplots(figsize=(8, 6.5))
    image = axis.imshow(grid, cmap="inferno", aspect="auto")
    figure.colorbar(image, ax=axis, label="state bytes" + (" (estimated)" if not doc["exact"] else ""))
    for hot in doc["hottest"]:
        position = next(i for i, g in enumerate(groups) if g["key_group"] == hot["key_group"])
        axis.annotate(str(hot["key_group"]), (position % width, position // width), color="cyan", ha="center",
                      va="center", fontsize=8, weight="bold")
    axis.set_title(f"state bytes per key group\ncheckpoint {doc['checkpoint_id']} of job {doc['job_id']} "
                   f"({width} key groups per row)")
    axis.set_xticks([])
    axis.set_yticks([])
    figure.tight_layout()
    return figure


def save(figure: Any, path: str) -> None:
    figure.savefig(path, dpi=100)
    _pyplot().close(figure)
