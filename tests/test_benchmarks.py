"""The benchmark harness runs (its non-Spark sections, at a tiny size) and writes the documented
schema. Nothing here is timed: the figures themselves are not checked."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD_FIELDS = {"name": str, "group": str, "ours": (int, float), "peer": (int, float), "unit": str,
                 "better": str}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("bench") / "results.json"
    subprocess.run([sys.executable, "-m", "benchmarks", "--size", "tiny", "--sections",
                    "operations,serializers,ttl,checkpoint,migration,memory,per-row", "--json", str(path)], cwd=ROOT, check=True,
                   capture_output=True, text=True, timeout=120)
    return json.loads(path.read_text())


def test_top_level(results: dict) -> None:
    assert results["schema_version"] == 1
    assert results["run"]["size"] == "tiny"
    assert results["run"]["sections"] == ["operations", "serializers", "ttl", "checkpoint", "migration", "memory",
                                          "per-row"]
    assert {r["group"] for r in results["records"]} == {"operations", "serializers", "ttl", "checkpoint", "migration",
                                                        "memory", "per-row"}


def test_records(results: dict) -> None:
    records = results["records"]
    assert len({r["name"] for r in records}) == len(records), "record names are unique"
    for r in records:
        for field, kind in RECORD_FIELDS.items():
            assert isinstance(r[field], kind), (r["name"], field)
        assert r["better"] in ("higher", "lower")
        assert r["ratio"] is None or math.isclose(r["ratio"], r["ours"] / r["peer"])
        assert r.get("aim") is None or isinstance(r["aim"], (int, float))


def test_every_comparison_is_there(results: dict) -> None:
    names = {r["name"] for r in results["records"]}
    for backend in ("heap", "rocksdb", "lmdb"):
        assert f"{backend} ValueState get+update vs raw " + {"heap": "dict", "rocksdb": "rocksdict",
                                                              "lmdb": "py-lmdb"}[backend] in names
        assert f"{backend} checkpoint bytes at 10% churn: incremental vs full" in names
        assert f"{backend} rescale 4->8 vs restore 4->4 seconds" in names
        assert f"{backend} restore of 5,000 record keys: migrated to a new schema vs as is" in names
        for native in (f"{backend} native full checkpoint throughput vs disk write+fsync",
                       f"{backend} full checkpoint seconds: native vs canonical",
                       f"{backend} full checkpoint bytes: native vs canonical"):
            assert native in names, f"{native!r}: every built-in backend has native snapshots"
    assert {r["backend"] for r in results["records"] if r["group"] == "memory"} == {"rocksdb", "lmdb"}
    per_row = [r for r in results["records"] if r["group"] == "per-row"]
    assert {r["backend"] for r in per_row if r.get("aim")} == {"heap", "rocksdb", "lmdb"}, "the engine's aim, each backend"
    assert sum(1 for r in per_row if "breakdown" in r["name"]) == 6
    for shape in ("small record", "nested record"):
        for peer in ("msgpack dict", "pickle"):
            for what in ("bytes", "encode", "decode"):
                assert f"serializers {shape}: record {what} vs {peer}" in names


@pytest.mark.spark
def test_the_observability_section_runs_at_the_tiny_size(tmp_path) -> None:
    """Spark runs: in a process of its own, as the harness is started."""
    path = tmp_path / "results.json"
    subprocess.run([sys.executable, "-m", "benchmarks", "--size", "tiny", "--sections", "observability", "--json",
                    str(path)], cwd=ROOT, check=True, capture_output=True, text=True, timeout=600,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), ROOT])})
    (found,) = json.loads(path.read_text())["records"]
    assert found["group"] == "observability" and found["name"].startswith("metrics on vs off: query seconds")
    assert len(found["on_runs"]) == len(found["off_runs"]) == 1 and found["noise"] >= 1
