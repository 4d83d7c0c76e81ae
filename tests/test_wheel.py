"""The package as users install it: the sdist and the wheel built from this checkout, their file lists
and metadata, and the wheel installed into a fresh virtual environment, away from the source tree,
where a user's first steps (tests/installed_smoke.py) must work and statekit's pytest plugin must
change nothing in a project that never asks for the conformance suite."""
from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "statekit"
EXTRAS = {"conformance", "s3", "postgres", "bench", "docs", "connect", "test", "plot", "progress"}
#: the interpreters the installed wheel is tried with: this one, and those .ci/run finds besides it
PYTHONS = [sys.executable, *filter(None, os.environ.get("STATEKIT_TEST_PYTHONS", "").split(os.pathsep))]

pytestmark = pytest.mark.slow


def _source_files() -> set[str]:
    """Every file of the package in the source tree, as a path in the wheel."""
    return {str(path.relative_to(SOURCE.parent)) for path in SOURCE.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}


def _modules() -> list[str]:
    names = []
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: nothing points into this checkout or its virtual environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(Path(sys.prefix))))
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _run(command: list[str], cwd: Path, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and the wheel built from it (``python -m build``'s default), of this checkout."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    shutil.rmtree(SOURCE.parent / "statekit.egg-info", ignore_errors=True)  # the sdist step writes it
    (sdist,), (wheel,) = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module")
def install(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``install(python)``: the Python of a new virtual environment of ``python`` holding the wheel
    with the ``conformance`` extra (made once per interpreter)."""
    made: dict[str, Path] = {}

    def installed_with(python: str) -> Path:
        if python not in made:
            venv = tmp_path_factory.mktemp("venv")
            _run([python, "-m", "venv", str(venv)], cwd=venv)
            _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  f"{artifacts['wheel']}[conformance]"], cwd=venv)
            made[python] = venv / "bin" / "python"
        return made[python]
    return installed_with


@pytest.fixture(scope="module")
def installed(install: Callable[[str], Path]) -> Path:
    return install(sys.executable)


def test_the_wheel_holds_every_file_of_the_package_and_nothing_else(artifacts: dict[str, Path]) -> None:
    with zipfile.ZipFile(artifacts["wheel"]) as wheel:
        packaged = {name for name in wheel.namelist() if name.startswith("statekit/")}
    source = _source_files()
    assert not source - packaged, f"missing from the wheel: {sorted(source - packaged)}"
    assert not packaged - source, f"in the wheel but not in the source tree: {sorted(packaged - source)}"


def test_the_sdist_holds_the_sources_licence_and_docs(artifacts: dict[str, Path]) -> None:
    with tarfile.open(artifacts["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    wanted = {f"src/{name}" for name in _source_files()} | {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml"}
    assert not wanted - names, f"missing from the sdist: {sorted(wanted - names)}"


def test_the_metadata_is_complete(artifacts: dict[str, Path]) -> None:
    with zipfile.ZipFile(artifacts["wheel"]) as wheel:
        dist_info = next(n.split("/")[0] for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(wheel.read(f"{dist_info}/METADATA").decode())
        licence = wheel.read(f"{dist_info}/licenses/LICENSE").decode()
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    version = re.search(r'^__version__ = "([^"]+)"', (SOURCE / "__init__.py").read_text(), re.M).group(1)
    assert metadata["Version"] == version
    assert metadata["License-Expression"] == "Apache-2.0" and "Apache License" in licence
    assert set(metadata.get_all("Provides-Extra")) == EXTRAS
    assert any(r.startswith("pytest") and 'extra == "conformance"' in r for r in metadata.get_all("Requires-Dist"))
    assert {url.split(",")[0] for url in metadata.get_all("Project-URL")} >= {"Homepage", "Documentation", "Source",
                                                                              "Changelog"}
    assert "statekit = statekit.cli:main" in entry_points and "statekit = statekit.conformance_tests.plugin" in entry_points


def test_twine_check_passes(artifacts: dict[str, Path]) -> None:
    result = _run([sys.executable, "-m", "twine", "check", "--strict", str(artifacts["sdist"]),
                   str(artifacts["wheel"])], cwd=artifacts["wheel"].parent)
    assert result.stdout.count("PASSED") == 2, result.stdout


def _python_version(python: str | Path) -> str:
    return subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.spark
@pytest.mark.parametrize("python", PYTHONS, ids=_python_version)
def test_the_installed_wheel_works_away_from_the_source_tree(install: Callable[[str], Path], python: str,
                                                             artifacts: dict[str, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(artifacts["wheel"]) as wheel:
        metadata = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"Programming Language :: Python :: {_python_version(python)}\n" in metadata, \
        "the classifiers name the Python versions the wheel is tested with"
    installed = install(python)
    modules = tmp_path / "modules.json"
    modules.write_text(json.dumps(_modules()))
    shutil.copy(Path(__file__).with_name("installed_smoke.py"), tmp_path)
    result = _run([str(installed), "installed_smoke.py", str(modules)], cwd=tmp_path)
    assert result.stdout.rstrip().endswith("installed package: OK"), result.stdout


UNRELATED_TESTS = '''
import pytest

def test_adds():
    assert 1 + 1 == 2

@pytest.mark.spark
def test_with_a_marker_of_its_own():
    pass

def test_fails():
    assert [1, 2] == [1, 3]
'''


@pytest.mark.parametrize("options", [[], ["--strict-markers"], ["-m", "not spark"]])
def test_the_pytest_plugin_changes_nothing_in_a_project_that_does_not_ask_for_it(
        installed: Path, tmp_path: Path, options: list[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "unrelated"\nversion = "1"\n\n'
                                             '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_app.py").write_text(UNRELATED_TESTS)

    def pytest_run(*extra: str) -> tuple[int, str]:
        result = subprocess.run([str(installed), "-m", "pytest", "-p", "no:cacheprovider", "-rA", *options, *extra],
                                cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300)
        lines = [re.sub(r" in [\d.]+s\b.*", "", line) for line in result.stdout.splitlines()
                 if not line.startswith(("platform ", "rootdir:", "configfile:", "plugins:"))]
        return result.returncode, "\n".join(lines)

    loaded = subprocess.run([str(installed), "-m", "pytest", "--help"], cwd=tmp_path, env=_clean_env(),
                            capture_output=True, text=True, timeout=300).stdout
    assert "--statekit-backend" in loaded, "statekit's plugin was not loaded: the comparison below would prove nothing"
    with_plugin, without_plugin = pytest_run(), pytest_run("-p", "no:statekit")
    assert with_plugin == without_plugin


@pytest.mark.parametrize("target", ["demo", "demo-local", "demo-windows"])
def test_the_demos_install_statekit_alone(target: str, tmp_path: Path) -> None:
    """A newcomer's first command installs no test tools (``make -n``: the commands, none run)."""
    commands = _run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT).stdout.splitlines()
    installs = [c for c in commands if " -m pip install " in c and "--upgrade pip" not in c]
    assert installs and all(c.endswith(" -e .") for c in installs), installs
