"""statekit's pytest plugin (entry point ``pytest11``, name ``statekit``).

``pytest --statekit-backend NAME [--statekit-storage NAME]`` runs the whole conformance suite
against that backend and storage (built-in names, entry-point names or ``module:Class``) and
ends with the conformance report; ``--statekit-report`` prints the report for a run of a
plugin's own subclasses of the mixins. The plugin also provides the session-scoped
``statekit_spark`` fixture the Spark level uses. It imports nothing heavy until a test needs it.
"""
from __future__ import annotations

import importlib.util
from typing import Any, Iterator

import pytest

from statekit.conformance_tests.levels import LEVELS, level_of
from statekit.conformance_tests.report import ConformanceReport
from statekit.conformance_tests.spark_session import DEFAULT_MASTER
from statekit.conformance_tests.target import DEFAULT_STORAGE, SuiteTarget, parse_pairs
from statekit.spi.errors import ConfigurationError

SUITE_MODULE = "statekit.conformance_tests.suite"
_TARGET = pytest.StashKey[SuiteTarget]()


#: the suite's options: ``--statekit-<name>`` for pytest, ``--<name>`` for the command
SUITE_OPTIONS: dict[str, dict[str, Any]] = {
    "backend": {"metavar": "NAME", "help": "the state backend to test: a built-in name (heap, rocksdb, lmdb), an "
                                           "entry point of group statekit.backends, or module:Class"},
    "storage": {"metavar": "NAME", "help": f"the checkpoint storage to test: jobmanager, filesystem, an entry point "
                                           f"of group statekit.storages, or module:Class (default: {DEFAULT_STORAGE})"},
    "option": {"action": "append", "default": [], "metavar": "KEY=VALUE",
               "help": "a backend option, as spark.statekit.backend.<name>.KEY would set it (repeatable)"},
    "storage-option": {"action": "append", "default": [], "metavar": "KEY=VALUE",
                       "help": "a storage option, as spark.statekit.checkpoint.<name>.KEY would set it (repeatable)"},
    "level": {"action": "append", "default": [], "metavar": "LEVEL",
              "help": f"run only this level (repeatable, or comma-separated): {', '.join(LEVELS)}"},
    "spark-master": {"default": DEFAULT_MASTER, "metavar": "MASTER",
                     "help": f"the Spark level's master (default: {DEFAULT_MASTER})"},
    "spark-connect": {"action": "store_true",
                      "help": "run the Spark level on a Spark Connect session, on a local Connect server of that "
                              "master (needs statekit[connect])"},
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("statekit", "statekit conformance suite (runs when a backend or storage is given)")
    for name, settings in SUITE_OPTIONS.items():
        group.addoption(f"--statekit-{name}", **settings)
    group.addoption("--statekit-report", action="store_true",
                    help="print the conformance report (implied by --statekit-backend/--statekit-storage)")


def _target(config: pytest.Config) -> SuiteTarget | None:
    backend, storage = config.getoption("statekit_backend"), config.getoption("statekit_storage")
    if backend is None and storage is None:
        return None
    try:
        target = SuiteTarget(backend or "heap", storage or DEFAULT_STORAGE,
                             parse_pairs(config.getoption("statekit_option"), "--statekit-option"),
                             parse_pairs(config.getoption("statekit_storage_option"), "--statekit-storage-option"))
        target.check()
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from exc
    return target


def _levels(config: pytest.Config) -> set[str]:
    values = config.getoption("statekit_level")
    levels = {part.strip() for value in values for part in value.split(",") if part.strip()}
    unknown = levels - set(LEVELS)
    if unknown:
        raise pytest.UsageError(f"--statekit-level {', '.join(sorted(unknown))} is unknown; "
                                f"levels: {', '.join(LEVELS)}")
    return levels


def pytest_configure(config: pytest.Config) -> None:
    # a marker of statekit's own name: a project's own `spark` marker (and --strict-markers) is left alone
    config.addinivalue_line("markers", "statekit_spark: the conformance suite's Spark level (the statekit_spark fixture)")
    target = _target(config)
    _levels(config)  # fail early on a wrong level
    if target is not None:
        config.stash[_TARGET] = target
        suite = importlib.util.find_spec(SUITE_MODULE).origin  # type: ignore[union-attr]
        # the suite replaces the default test paths; paths given on the command line run too
        if config.args_source is not pytest.Config.ArgsSource.ARGS:
            config.args = [suite]
        elif suite not in config.args:
            config.args.append(suite)
    if target is not None or config.getoption("statekit_report"):
        config.pluginmanager.register(ConformanceReport(target), "statekit-conformance-report")


def pytest_report_header(config: pytest.Config) -> str | None:
    target = config.stash.get(_TARGET, None)
    if target is None:
        return None
    return f"statekit conformance suite: backend {target.backend}, storage {target.storage}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    levels = _levels(config)
    if not levels:
        return
    deselected = [item for item in items if level_of(item) not in levels]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if level_of(item) in levels]


@pytest.fixture(scope="session")
def statekit_target(pytestconfig: pytest.Config) -> SuiteTarget:
    """The backend and storage named by --statekit-backend / --statekit-storage."""
    target = pytestconfig.stash.get(_TARGET, None)
    if target is None:
        pytest.fail("the packaged suite runs with --statekit-backend NAME (or python -m statekit.conformance_tests)")
    return target


@pytest.fixture(scope="session")
def statekit_spark(pytestconfig: pytest.Config) -> Iterator[Any]:
    """A real local SparkSession (``local[2,3]`` unless --statekit-spark-master; a Spark Connect
    session with --statekit-spark-connect), started on first use and shared by the whole session."""
    from statekit.conformance_tests.spark_session import local_spark_session

    session = local_spark_session(pytestconfig.getoption("statekit_spark_master"),
                                  connect=pytestconfig.getoption("statekit_spark_connect"))
    yield session
    session.stop()
