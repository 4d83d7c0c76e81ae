"""What a user does first with an installed statekit, run by tests/test_wheel.py with the Python of a
fresh virtual environment holding only the wheel (``statekit[conformance]``), in a directory
without the source tree. Every step prints one ``ok:`` line; any failure exits non-zero.

``python installed_smoke.py MODULES.json``: MODULES.json lists the source tree's modules, each of
which must import from the installed package (a module that needs an extra not installed must
say which extra in its ImportError).
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: modules that need an extra the smoke environment does not install, and that extra
NEEDS_EXTRA = {"statekit.sinks.postgres": "statekit[postgres]"}
BIN = Path(sys.executable).parent


def run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(command)} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def check_source_tree_is_not_importable() -> None:
    import statekit

    location = Path(statekit.__file__).resolve()
    if "site-packages" not in location.parts:
        raise SystemExit(f"FAILED: statekit was imported from {location}, not from the installed package")
    print(f"ok: statekit {statekit.__version__} imported from the installed package")


def import_every_module(modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            extra = NEEDS_EXTRA.get(name)
            if extra is None or extra not in str(exc):
                raise SystemExit(f"FAILED: import {name}: {exc!r}") from exc
    print(f"ok: {len(modules)} modules import")


def console_script() -> None:
    import statekit

    version = run(str(BIN / "statekit"), "--version").strip()
    if version != f"statekit {statekit.__version__}":
        raise SystemExit(f"FAILED: statekit --version printed {version!r}")
    if "checkpoints" not in run(str(BIN / "statekit"), "--help"):
        raise SystemExit("FAILED: statekit --help does not list its commands")
    print(f"ok: {version}, statekit --help")


def conformance_command(work: Path) -> None:
    output = run(sys.executable, "-m", "statekit.conformance_tests", "--backend", "heap", "--level", "semantics",
                 "-q", "-p", "no:cacheprovider", f"--rootdir={work}")
    if "statekit conformance: PASSED" not in output:
        raise SystemExit(f"FAILED: the conformance command did not pass:\n{output}")
    print("ok: python -m statekit.conformance_tests --backend heap --level semantics")


def local_runner_job() -> None:
    from statekit import KeyedProcessFunction, ValueStateDescriptor
    from statekit.runtime import LocalRunner
    from statekit.serializers import Int64Serializer

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Int64Serializer(), default=0))

        def process(self, row, ctx):
            self.count.update(self.count.value() + 1)
            yield ctx.current_key, self.count.value()

    runner = LocalRunner(Count(), key_selector=lambda row: row["user"], parallelism=4)
    runner.run_epoch([{"user": "ann"}, {"user": "bob"}, {"user": "ann"}])
    runner.rescale(2)
    output = runner.run_epoch([{"user": "ann"}])
    if output != [("ann", 3)]:
        raise SystemExit(f"FAILED: the local runner gave {output}, expected [('ann', 3)]")
    print("ok: LocalRunner job with a checkpoint and a rescale 4 -> 2")


def spark_job(work: Path) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from statekit import KeyedProcessFunction, ValueStateDescriptor
    from statekit.serializers import Int64Serializer
    from statekit.spark import process_keyed

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Int64Serializer(), default=0))

        def process(self, row, ctx):
            self.count.update(self.count.value() + 1)
            yield row["user"], self.count.value()

    spark = (SparkSession.builder.master("local[2]").appName("statekit-smoke").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        checkpoints = (work / "checkpoints").as_uri()
        for name, value in {"backend": "rocksdb", "checkpoint.storage": "filesystem", "checkpoint.dir": checkpoints,
                            "parallelism": "2"}.items():
            spark.conf.set(f"spark.statekit.{name}", value)
        rows = [(f"user-{i % 7}",) for i in range(50)]
        for _ in range(2):
            process_keyed(spark.createDataFrame(rows, "user string"), "user", Count(), "user string, count long",
                          job_id="smoke").collect()
        expected = {f"user-{k}": 2 * sum(1 for i in range(50) if i % 7 == k) for k in range(7)}
        state = spark.read.format("statekit").option("state", "count").load(f"{checkpoints}/smoke")
        found = {row.user: row.value for row in state.select("user", "value").collect()}
        if found != expected:
            raise SystemExit(f"FAILED: format('statekit') read {found}, expected {expected}")
        print("ok: process_keyed on local[2] (RocksDB, 2 checkpoints), state read with format('statekit')")
    finally:
        spark.stop()
    lookup = json.loads(run(str(BIN / "statekit"), "state", "get", f"{checkpoints}/smoke", "--state", "count",
                            "--key", "user-3", "--json"))
    if lookup["value"] != expected["user-3"]:
        raise SystemExit(f"FAILED: statekit state get gave {lookup}, expected {expected['user-3']}")
    print("ok: statekit state get")


def main() -> None:
    modules = json.loads(Path(sys.argv[1]).read_text())
    check_source_tree_is_not_importable()
    import_every_module(modules)
    console_script()
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        conformance_command(work)
        local_runner_job()
        spark_job(work)
    print("installed package: OK")


if __name__ == "__main__":
    main()
