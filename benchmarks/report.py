"""How every benchmark reports: one record per comparison, a table, and optionally a JSON file.

A record is ``{"name", "group", "ours", "peer", "unit", "ratio", "better", ...details}``: ``ours``
is statekit's figure, ``peer`` the comparison's in the same run, ``ratio`` = ours / peer, and
``better`` says which direction of the ratio is good (``"higher"`` for rates, ``"lower"`` for
times, bytes and memory). ``aim``, where a target exists, is the ratio to reach. The JSON file
is ``{"schema_version", "run", "records"}``; ``benchmarks/README.md`` documents it.
"""
from __future__ import annotations

import json
import math
from typing import Any

SCHEMA_VERSION = 1


def record(name: str, ours: float, peer: float, unit: str, *, group: str, better: str | None = None,
           aim: float | None = None, **details: Any) -> dict:
    """One comparison. ``better`` defaults to ``"higher"`` for rates (units ending in ``/s``)."""
    better = better or ("higher" if unit.endswith("/s") else "lower")
    ratio = ours / peer if peer else None
    result = {"name": name, "group": group, "ours": ours, "peer": peer, "unit": unit, "ratio": ratio,
              "better": better}
    if aim is not None:
        result["aim"] = aim
    return {**result, **details}


def meets_aim(result: dict) -> bool | None:
    """Whether the ratio reaches the record's aim (``None`` without an aim or a ratio)."""
    aim, ratio = result.get("aim"), result.get("ratio")
    if aim is None or ratio is None:
        return None
    return ratio >= aim if result["better"] == "higher" else ratio <= aim


def _figure(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.2f}" if abs(value) < 1e6 else f"{value:,.0f}"


def print_table(results: list[dict]) -> None:
    width = max(len(r["name"]) for r in results)
    print(f"{'comparison':{width}} {'statekit':>16} {'peer':>16} {'unit':>8} {'ratio':>8} {'better':>6} {'aim':>6}")
    for r in results:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3g}"
        verdict = {True: "", False: "  (misses aim)", None: ""}[meets_aim(r)]
        aim = "" if r.get("aim") is None else f"{r['aim']:g}"
        print(f"{r['name']:{width}} {_figure(r['ours']):>16} {_figure(r['peer']):>16} {r['unit']:>8} {ratio:>8} "
              f"{r['better']:>6} {aim:>6}{verdict}")


def write_json(results: list[dict], path: str, run: dict | None = None) -> None:
    with open(path, "w") as f:
        json.dump({"schema_version": SCHEMA_VERSION, "run": run or {}, "records": results}, f, indent=2)
        f.write("\n")


def report(results: list[dict], json_path: str | None = None, run: dict | None = None) -> None:
    """Print the table and, with ``json_path``, write the records there."""
    print_table(results)
    if json_path:
        write_json(results, json_path, run)
