"""The one command (and the pytest option) on a small subset of every level but Spark: the suite
runs against a backend named on the command line and ends with the conformance report.
Capabilities: only optional ones can be missing. The levels themselves run in
tests/test_conformance_*.py; here only the command, the plugin and the report are tested."""
from __future__ import annotations

import pytest

from conformance_command import run_suite
from statekit.backends.heap import HeapStateBackend
from statekit.conformance_tests.base import requires
from statekit.conformance_tests.report import capability_lines
from statekit.conformance_tests.target import SuiteTarget
from statekit.spi import Capabilities, ConfigurationError

#: one or two tests per level (Spark excluded: TestHeapSpark runs it)
SUBSET = ("test_value_update_then_value or test_round_trip_every_key_and_value or test_aborted_checkpoint "
          "or test_operator_state_redistribution or test_small_stream_round_trip or test_flipped_byte_is_a")


class FullSnapshotsHeap(HeapStateBackend):
    """The heap backend declaring no incremental snapshots (loaded by the command by module:Class)."""

    capabilities = Capabilities(incremental_snapshots=False, async_snapshots=True)


@pytest.mark.parametrize("module,options", [
    ("statekit.conformance_tests", ("--backend", "test_conformance_runner:FullSnapshotsHeap",
                                    "--storage", "jobmanager")),
    ("pytest", ("--statekit-backend", "test_conformance_runner:FullSnapshotsHeap",
                "--statekit-storage", "jobmanager")),
], ids=["command", "pytest-option"])
def test_the_suite_runs_by_name_and_reports_every_level(tmp_path, module, options):
    run = run_suite(tmp_path, *options, "-k", SUBSET, module=module)
    assert run.returncode == 0, run.output[-3000:]
    report = run.output[run.output.index("statekit conformance report"):]
    for line in ("backend: test_conformance_runner:FullSnapshotsHeap",
                 "storage: jobmanager (statekit.storage.memory.JobManagerCheckpointStorage)",
                 "declared capabilities: async_snapshots",
                 "not declared (their tests skip): incremental_snapshots, ttl, out_of_core"):
        assert line in report, report
    table = ["level         passed  failed  skipped",
             "semantics          1       0        0",
             "snapshots          2       0        2",
             "incremental        0       0        1",
             "rescale            2       0        0",
             "migration                     not run",
             "ttl                           not run",
             "timers                        not run",
             "storage            1       0        1",
             "spark                         not run",
             "total              6       0        4"]
    assert "\n".join(table) in report, report
    for line in ("  incremental    1  FullSnapshotsHeap does not declare capability 'incremental_snapshots'",
                 "  snapshots      1  FullSnapshotsHeap does not declare capability 'incremental_snapshots'",
                 "  snapshots      1  FullSnapshotsHeap does not declare capability 'native_snapshots'",
                 "  storage        1  the storage kept a 65536-byte stream inline: no file to damage",
                 "statekit conformance: PASSED (4 skipped, reasons above)"):
        assert line in report.splitlines(), report

def test_an_unknown_backend_fails_at_once_naming_the_accepted_ones(tmp_path):
    run = run_suite(tmp_path, "--backend", "nosuch")
    assert run.returncode == 4, run.output  # pytest's usage error: nothing ran
    assert "--backend='nosuch' is unknown; accepted: heap, lmdb, rocksdb" in run.output


def test_only_optional_capabilities_can_be_required():
    with pytest.raises(AssertionError, match="'rescaling' is not an optional capability .* required behaviour"):
        requires(HeapStateBackend(), "rescaling")
    with pytest.raises(pytest.skip.Exception, match="FullSnapshotsHeap does not declare capability 'incremental_"):
        requires(FullSnapshotsHeap(), "incremental_snapshots")
    requires(HeapStateBackend(), "incremental_snapshots")  # declared: no skip


def test_a_plugin_cannot_declare_required_behaviour_away():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class MoreCapabilities(Capabilities):
        rescaling: bool = False

    class Claims(HeapStateBackend):
        capabilities = MoreCapabilities()

    class NotCapabilities(HeapStateBackend):
        capabilities = {"ttl": True}  # type: ignore[assignment]

    assert capability_lines(Claims)[-1] == ("ignored, not optional capabilities (required behaviour cannot be "
                                            "declared away): rescaling")
    assert capability_lines(NotCapabilities) == [
        "capabilities: NotCapabilities.capabilities must be a statekit.spi.Capabilities, not dict"]


def test_command_line_options_go_through_the_settings_parser(tmp_path):
    target = SuiteTarget("lmdb", "jobmanager", {"map_size": "1m"}, {"max-state-size": "10m"})
    target.check()
    assert target.create_backend().lmdb_options.map_size == 1 << 20
    assert target.create_storage(tmp_path).max_state_size == 10 << 20
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.checkpoint\.filesystem\.memory-threshold must "
                                                 r"be a size"):
        SuiteTarget("heap", "filesystem", {}, {"memory-threshold": "lots"}).check()


@pytest.mark.parametrize("storage, option, message", [
    ("sqlite", "busy-timeout=-1", "spark.statekit.checkpoint.sqlite.busy-timeout must be"),
    ("sqlite", "pathh=x.db", "did you mean spark.statekit.checkpoint.sqlite.path"),
    ("filesystem", "memory-threshold=lots", "spark.statekit.checkpoint.filesystem.memory-threshold must be a size"),
])
def test_a_bad_storage_option_stops_the_run_before_any_test(tmp_path, storage, option, message):
    run = run_suite(tmp_path, "--backend", "heap", "--storage", storage, "--storage-option", option,
                    "--level", "storage")
    assert run.returncode == 4, run.output  # pytest's usage error: nothing ran
    assert message in run.output, run.output
    assert not run.failures and not run.passed, "tests ran although the storage's options were wrong"


def test_the_command_passes_a_flag_as_a_flag():
    from statekit.conformance_tests.__main__ import pytest_arguments

    arguments = pytest_arguments(["--backend", "heap", "--spark-connect", "-x"])
    assert arguments == ["-p", "statekit", "--statekit-backend", "heap", "--statekit-spark-master", "local[2,3]",
                         "--statekit-spark-connect", "-x"]
    assert "--statekit-spark-connect" not in pytest_arguments(["--backend", "heap"])
