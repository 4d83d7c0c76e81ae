"""Runs ``python -m statekit.conformance_tests`` in a subprocess, the way a plugin author does,
and reads back which tests failed (from a JUnit XML report) and the printed conformance report."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from spark_processes import short_job_env

TESTS = Path(__file__).resolve().parent


@dataclass
class SuiteRun:
    returncode: int
    output: str
    failures: dict[str, str]  # "TestClass::test_name[params]" -> failure message
    passed: set[str]


def run_suite(work: Path, *arguments: str, module: str = "statekit.conformance_tests", timeout: int = 600) -> SuiteRun:
    """Run ``python -m <module>`` (the command, or ``pytest`` with the plugin's options) with
    ``arguments`` in ``work``, with this directory on PYTHONPATH, so that ``module:Class`` names
    of test-only backends resolve here and in Spark's workers."""
    junit = work / "junit.xml"
    env = short_job_env(PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-m", module, *arguments, "-p", "no:cacheprovider", f"--junitxml={junit}"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    failures, passed = {}, set()
    for case in ElementTree.parse(junit).iter("testcase") if junit.exists() else ():
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        if failure is not None:
            failures[name] = failure.get("message", "")
        elif case.find("skipped") is None:
            passed.add(name)
    return SuiteRun(result.returncode, result.stdout + result.stderr, failures, passed)
