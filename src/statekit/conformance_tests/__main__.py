"""``python -m statekit.conformance_tests --backend NAME [--storage NAME] [--option KEY=VALUE ...]
[--level LEVEL ...] [pytest arguments]``: every level of the conformance suite against one backend
and storage, ending with the conformance report. Exits with pytest's exit code."""
from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Sequence

from statekit.conformance_tests.levels import LEVELS
from statekit.conformance_tests.plugin import SUITE_OPTIONS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m statekit.conformance_tests", allow_abbrev=False,
        description=f"Run statekit's conformance suite ({', '.join(LEVELS)}) against a state backend and a "
                    f"checkpoint storage. Arguments it does not know go to pytest (e.g. -x, -q, -k EXPR).")
    for name, settings in SUITE_OPTIONS.items():
        parser.add_argument(f"--{name}", **settings, required=name == "backend")
    return parser


def pytest_arguments(argv: Sequence[str]) -> list[str]:
    """The pytest command line equivalent to ``argv``."""
    args, rest = _parser().parse_known_args(argv)
    translated = ["-p", "statekit"]
    for name in SUITE_OPTIONS:
        value = getattr(args, name.replace("-", "_"))
        if isinstance(value, bool):  # a flag
            translated += [f"--statekit-{name}"] if value else []
            continue
        for item in value if isinstance(value, list) else [] if value is None else [value]:
            translated += [f"--statekit-{name}", item]
    return translated + list(rest)


def main(argv: Sequence[str] | None = None) -> int:
    """Run pytest in a fresh interpreter, where statekit is not imported yet: pytest then rewrites
    the suite's asserts (more detailed failure messages)."""
    arguments = pytest_arguments(sys.argv[1:] if argv is None else argv)
    return subprocess.call([sys.executable, "-m", "pytest", *arguments])


if __name__ == "__main__":
    sys.exit(main())
