"""The examples run and prove their results (each ends with an OK line or exits non-zero)."""
import subprocess
import sys
from pathlib import Path

import pytest

from spark_processes import short_job_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("example,master,ok", [
    ("local_demo.py", None, "OK: all 500 sensors"),
    pytest.param("spark_demo.py", "local[2]", "OK: all 500 sensors", marks=pytest.mark.spark),
    # separate executor processes: pickling, executor-local RocksDB and checkpoint files across JVMs
    pytest.param("spark_demo.py", "local-cluster[2,1,1024]", "OK: all 500 sensors", marks=pytest.mark.spark),
    pytest.param("windows_demo.py", None, "OK: every micro-batch's hourly averages and alerts match",
                 marks=pytest.mark.spark),
    pytest.param("orders_demo.py", None, "OK: every micro-batch's paid and unpaid orders match",
                 marks=pytest.mark.spark),
    pytest.param("inspect_state.py", None, "OK: state read back as written", marks=pytest.mark.spark),
    pytest.param("exactly_once.py", None, "OK: every output row exactly once", marks=pytest.mark.spark),
], ids=["local-runner", "spark-local", "spark-local-cluster", "windows", "orders", "inspect-state", "exactly-once"])
def test_example_runs_and_checks_itself(example, master, ok):
    env = short_job_env(PYTHONPATH=str(ROOT / "src"), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
                        **({"STATEKIT_DEMO_MASTER": master} if master else {}))
    result = subprocess.run([sys.executable, str(ROOT / "examples" / example)], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert ok in result.stdout, result.stdout[-2000:]


def test_the_plugin_guide_names_every_mixin_and_quotes_the_sqlite_conformance_module():
    """docs/plugin-authors.md tells a plugin author which mixins to subclass: each mixin with tests
    that the one-command suite runs is in its table, and the SQLite module it quotes as complete
    is the example's file (the quote had lost the timer and savepoint-conversion tests)."""
    import inspect

    from statekit.conformance_tests import suite

    guide = (ROOT / "docs" / "plugin-authors.md").read_text()
    mixins = {klass.__name__ for _, test_class in inspect.getmembers(suite, inspect.isclass)
              if test_class.__name__.startswith("Test") for klass in test_class.__mro__
              if klass.__module__.startswith("statekit.conformance_tests.")
              and any(name.startswith("test_") for name in vars(klass))}
    table = guide[guide.index("| module | mixins |"):guide.index("The SQLite example's complete conformance module")]
    assert mixins and not {name for name in mixins if f"`{name}`" not in table}, \
        f"mixins missing from the guide's table: {sorted(n for n in mixins if f'`{n}`' not in table)}"
    module = (ROOT / "examples" / "statekit-sqlite" / "tests" / "test_sqlite_conformance.py").read_text()
    code = module[module.index('"""', 3) + 4:]
    assert f"```python\n{code}```" in guide, "the guide's quote of test_sqlite_conformance.py differs from the file"
