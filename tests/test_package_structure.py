"""What importing statekit costs, and where plugins are found."""
from __future__ import annotations

import subprocess
import sys

import pytest

from statekit import registry
from statekit.spi import ConfigurationError, StateBackend


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    return set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                              text=True).stdout.split())


@pytest.mark.parametrize("statement", ["import statekit", "import statekit.spi",
                                       "from statekit import ValueStateDescriptor, KeyedProcessFunction"])
def test_the_contracts_import_nothing_heavy(statement: str) -> None:
    loaded = _modules_after(statement)
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("fsspec", "pyarrow", "pandas", "pyspark", "rocksdict",
                                                            "lmdb")
                   or m.startswith(("statekit.runtime.local_runner", "statekit.storage", "statekit.checkpoint",
                                    "statekit.backends", "statekit.spark")))
    assert not heavy, f"{statement!r} imports {heavy}"


def test_the_pytest_plugin_imports_no_backend_storage_or_engine() -> None:
    loaded = _modules_after("import statekit.conformance_tests.plugin")
    heavy = sorted(m for m in loaded if m.split(".")[0] in ("fsspec", "pyarrow", "pyspark")
                   or m.startswith(("statekit.storage", "statekit.backends.", "statekit.spark")))
    assert not heavy, f"statekit's pytest plugin (loaded by every pytest run) imports {heavy}"


class _Registered(StateBackend):
    name = "registered-at-run-time"

    def create_keyed_backend(self, params):  # pragma: no cover - never created
        raise NotImplementedError

    def create_operator_backend(self, params):  # pragma: no cover
        raise NotImplementedError


def test_register_backend_at_run_time() -> None:
    registry.register_backend("run-time-backend", _Registered)
    assert registry.backend_class("run-time-backend") is _Registered
    assert "run-time-backend" in registry.available_backends()
    registry.register_backend("run-time-spec", f"{__name__}:_Registered")
    assert registry.backend_class("run-time-spec") is _Registered


def test_a_taken_name_needs_clobber() -> None:
    with pytest.raises(ConfigurationError, match="already registered.*clobber=True"):
        registry.register_backend("heap", _Registered)
    with pytest.raises(ConfigurationError, match="not a StateBackend subclass"):
        registry.register_backend("not-a-backend", dict)  # type: ignore[arg-type]
