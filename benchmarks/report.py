"""How every benchmark reports: a short table, and optionally the records as JSON.

Each record is ``{"name", "ours", "peer", "unit", "ratio", ...details}``: ``ours`` is statekit's
figure, ``peer`` the comparison's in the same run, ``ratio`` = ours / peer (for times and bytes,
lower is better; for rates, higher is better).
"""
from __future__ import annotations

import json


def report(results: list[dict], json_path: str | None = None) -> None:
    width = max(len(r["name"]) for r in results)
    print(f"{'comparison':{width}} {'statekit':>16} {'peer':>16} {'ratio':>7}")
    for r in results:
        print(f"{r['name']:{width}} {r['ours']:>16,.2f} {r['peer']:>16,.2f} {r['ratio']:>7.3f}  ({r['unit']})")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=2)
