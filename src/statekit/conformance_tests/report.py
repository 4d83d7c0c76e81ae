"""The conformance report printed at the end of a run: the backend's declared capabilities,
then per level passed / failed / skipped counts, every skip reason and every failure."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import pytest

from statekit.conformance_tests.base import OPTIONAL_CAPABILITIES, declared_capabilities
from statekit.conformance_tests.levels import LEVELS, OTHER, level_of
from statekit.conformance_tests.target import SuiteTarget
from statekit.spi.backend import StateBackend

OUTCOMES = ("passed", "failed", "skipped")
MAX_MESSAGE = 300


@dataclass
class Outcome:
    level: str
    test: str  # class::function[params]
    result: str = "not run"  # or one of OUTCOMES
    detail: str = ""  # the skip reason or the failure message


def _first_line(text: str) -> str:
    line = next((part for part in text.strip().splitlines() if part.strip()), "")
    return line if len(line) <= MAX_MESSAGE else line[:MAX_MESSAGE] + "..."


def _detail(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        return _first_line(longrepr[2].removeprefix("Skipped: "))
    crash = getattr(longrepr, "reprcrash", None)
    return _first_line(crash.message if crash is not None else str(longrepr))


def capability_lines(backend: type[StateBackend]) -> list[str]:
    try:
        declared = declared_capabilities(backend)
    except AssertionError as exc:
        return [f"capabilities: {exc}"]
    lines = [f"declared capabilities: {', '.join(n for n, on in declared.items() if on) or 'none'}",
             f"not declared (their tests skip): {', '.join(n for n, on in declared.items() if not on) or 'none'}"]
    ignored = [name for name in backend.capabilities.declared() if name not in OPTIONAL_CAPABILITIES]
    if ignored:
        lines.append(f"ignored, not optional capabilities (required behaviour cannot be declared away): "
                     f"{', '.join(ignored)}")
    return lines


class ConformanceReport:
    """A pytest plugin object: records every conformance test's outcome, prints the report."""

    def __init__(self, target: SuiteTarget | None) -> None:
        self.target = target
        self.outcomes: dict[str, Outcome] = {}
        self.backends: dict[str, type[StateBackend]] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            self.outcomes[item.nodeid] = Outcome(level_of(item), item.nodeid.split("::", 1)[-1])

    def pytest_runtest_call(self, item: pytest.Item) -> None:
        backend = getattr(item, "funcargs", {}).get("state_backend")
        if isinstance(backend, StateBackend):
            self.backends.setdefault(_qualified(type(backend)), type(backend))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = self.outcomes.get(report.nodeid)
        if outcome is None or outcome.result == "failed":
            return
        if report.failed or report.skipped:
            outcome.result, outcome.detail = ("failed" if report.failed else "skipped"), _detail(report)
        elif report.when == "call":
            outcome.result = "passed"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.section("statekit conformance report")
        for line in self.lines():
            terminalreporter.line(line)

    # --- rendering
    def lines(self) -> list[str]:
        ran = [o for o in self.outcomes.values() if o.result in OUTCOMES]
        return [*self._subject(), "", *self._table(ran), *self._skips(ran), *self._failures(ran), "",
                self._verdict(ran)]

    def _subject(self) -> list[str]:
        lines = []
        if self.target is not None:
            backend, storage = self.target.backend_class(), self.target.storage_class()
            options = ", ".join(f"{k}={v}" for k, v in self.target.backend_options.items()) or "defaults"
            lines += [f"backend: {self.target.backend} ({_qualified(backend)}; options: {options})",
                      f"storage: {self.target.storage} ({_qualified(storage)})"]
            self.backends.setdefault(_qualified(backend), backend)
        for name, cls in sorted(self.backends.items()):
            if self.target is None:
                lines.append(f"backend: {name}")
            lines += capability_lines(cls)
        return lines

    @staticmethod
    def _table(ran: list[Outcome]) -> list[str]:
        counts = {level: Counter() for level in (*LEVELS, OTHER)}
        for outcome in ran:
            counts[outcome.level][outcome.result] += 1
        rows = [f"{'level':<12}{'passed':>8}{'failed':>8}{'skipped':>9}"]
        for level, count in counts.items():
            if count:
                rows.append(f"{level:<12}{count['passed']:>8}{count['failed']:>8}{count['skipped']:>9}")
            elif level != OTHER:
                rows.append(f"{level:<12}{'not run':>25}")
        total = Counter(o.result for o in ran)
        rows.append(f"{'total':<12}{total['passed']:>8}{total['failed']:>8}{total['skipped']:>9}")
        return rows

    @staticmethod
    def _skips(ran: list[Outcome]) -> list[str]:
        reasons = Counter((o.level, o.detail) for o in ran if o.result == "skipped")
        return _block(f"skipped ({sum(reasons.values())}), by reason:",
                      (f"  {level:<12}{n:>4}  {reason}" for (level, reason), n in sorted(reasons.items())))

    @staticmethod
    def _failures(ran: list[Outcome]) -> list[str]:
        failed = [o for o in ran if o.result == "failed"]
        return _block(f"failed ({len(failed)}):",
                      (f"  {o.level:<12}{o.test}\n  {'':<12}  {o.detail}" for o in failed))

    @staticmethod
    def _verdict(ran: list[Outcome]) -> str:
        failed_levels = [level for level in (*LEVELS, OTHER) if any(o.level == level and o.result == "failed"
                                                                    for o in ran)]
        if failed_levels:
            return f"statekit conformance: FAILED in {', '.join(failed_levels)}"
        if not ran:
            return "statekit conformance: NO TESTS RAN"
        skipped = sum(o.result == "skipped" for o in ran)
        return "statekit conformance: PASSED" + (f" ({skipped} skipped, reasons above)" if skipped else "")


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _block(title: str, lines: Iterable[str]) -> list[str]:
    body = [part for line in lines for part in line.split("\n")]
    return ["", title, *body] if body else []
