"""What importing statekit costs, and where plugins are found."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import statekit
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


# ---------------------------------------------------------------------------- the source tree

SOURCE = Path(statekit.__file__).parent


def _modules(under: Path) -> dict[str, ast.Module]:
    return {str(path.relative_to(SOURCE.parent)): ast.parse(path.read_text(), str(path))
            for path in sorted(under.rglob("*.py"))}


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _concrete_storages() -> set[str]:
    """The modules of ``statekit/storage`` that define a ``CheckpointStorage``."""
    found = set()
    for name, tree in _modules(SOURCE / "storage").items():
        if any(isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "CheckpointStorage" for b in node.bases)
               for node in ast.walk(tree)):
            found.add(name.removesuffix(".py").replace("/", "."))
    return found


def test_no_module_outside_storage_imports_a_concrete_storage() -> None:
    concrete = _concrete_storages()
    assert {"statekit.storage.filesystem", "statekit.storage.memory"} <= concrete, concrete
    offenders = {name: sorted(_imported(tree) & concrete) for name, tree in _modules(SOURCE).items()
                 if not name.startswith("statekit/storage/") and _imported(tree) & concrete}
    assert not offenders, (f"modules outside statekit/storage import a concrete storage (use the CheckpointStorage "
                           f"contract, or the registry to pick one by name): {offenders}")


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for element in node.elts for s in _strings(element)}
    return set()


def test_no_code_outside_a_backend_tests_a_backend_name() -> None:
    names = set(registry.available_backends())
    assert {"heap", "rocksdb", "lmdb"} <= names, names
    offenders = []
    for module, tree in _modules(SOURCE).items():
        if module.startswith("statekit/backends/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                compared = _strings(node.left).union(*(_strings(c) for c in node.comparators))
                if compared & names:
                    offenders.append(f"{module}:{node.lineno} compares with {sorted(compared & names)}")
    assert not offenders, ("code outside a backend's package decides by a backend's name (declare a capability or "
                           "an attribute on the backend instead): " + "; ".join(offenders))


#: what a classic session has and a Spark Connect session has not (``statekit.spark.session`` asks
#: a session what statekit needs through conf and DataFrames instead)
_CLASSIC_ONLY_ATTRIBUTES = {"sparkContext", "_sc", "_jvm", "_jsc", "_jsparkSession", "_jdf"}
_CLASSIC_ONLY_IMPORTS = {"pyspark.accumulators", "pyspark.broadcast", "pyspark.context", "py4j"}


def test_no_module_uses_an_api_spark_connect_lacks() -> None:
    offenders = []
    for module, tree in _modules(SOURCE).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in _CLASSIC_ONLY_ATTRIBUTES:
                offenders.append(f"{module}:{node.lineno} uses .{node.attr}")
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in _CLASSIC_ONLY_IMPORTS
                                                      or a.name in _CLASSIC_ONLY_IMPORTS for a in node.names):
                offenders.append(f"{module}:{node.lineno} imports {[a.name for a in node.names]}")
            elif isinstance(node, ast.ImportFrom) and (
                    (node.module or "").split(".")[0] in _CLASSIC_ONLY_IMPORTS or node.module in _CLASSIC_ONLY_IMPORTS
                    or node.module == "pyspark" and {"SparkContext", "Accumulator", "Broadcast"} & {
                        a.name for a in node.names}):
                offenders.append(f"{module}:{node.lineno} imports from {node.module}")
    assert not offenders, ("statekit runs on classic and Spark Connect sessions alike, and Connect has no "
                           "SparkContext, accumulators, broadcast variables or JVM access: " + "; ".join(offenders))
