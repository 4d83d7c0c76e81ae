"""The documentation (README.md and docs/) builds, links where it says, and its code works.

The convention, also described in docs/getting-started.md ("Working on the documentation"):

- A fenced code block preceded by the line ``<!-- test: run -->`` (blank lines between are
  allowed; MkDocs passes the comment through, invisible) is a **complete program**. Python blocks
  run with this interpreter, ``sh`` blocks with ``bash -e`` (this environment's ``statekit`` on the
  ``PATH``). The marked blocks of one page run in order in one fresh temporary directory, so a shell
  block may use the files an earlier program of its page wrote. Each must exit 0. A program that
  appears verbatim on an earlier page (README.md first) runs there only.
- Every other ``python`` block must compile (fragments may use names they do not define).
- Every ``statekit ...`` command line of a ``sh``/``console`` block must parse with the CLI's own
  argument parser.

``mkdocs build --strict`` (with the anchor and link checks of mkdocs.yml) is the test that every
page is in the navigation, every navigation entry exists and every link and anchor between pages
resolves; the README is not part of the site, so its links into docs/ are checked here.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_processes import short_job_env

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MARK = "<!-- test: run -->"
FENCE = re.compile(r"^```([\w-]*)\s*$")
#: seconds one complete program may take (a Spark program starts a JVM: 10-30 s on a busy machine)
TIMEOUT = {"spark": 300, "plain": 120}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    run: bool

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def uses_spark(self) -> bool:
        return "pyspark" in self.code or "SparkSession" in self.code


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def code_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each marked as a complete program or not."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        assert end is not None, f"{page.relative_to(ROOT)}:{i + 1}: a code fence that is never closed"
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        blocks.append(Block(page, i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n", before == MARK))
        i = end + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in code_blocks(page)]


def programs_to_run() -> dict[Path, list[Block]]:
    """Per page, its complete programs in order, less those an earlier page already runs verbatim."""
    seen: set[str] = set()
    result: dict[Path, list[Block]] = {}
    for page in pages():
        fresh = []
        for block in code_blocks(page):
            if block.run and block.code not in seen:
                seen.add(block.code)
                fresh.append(block)
        if fresh:
            result[page] = fresh
    return result


def _page_param(page: Path, blocks: list[Block]):
    marks = [pytest.mark.spark, pytest.mark.slow] if any(b.uses_spark for b in blocks) else []
    return pytest.param(page, blocks, marks=marks, id=str(page.relative_to(ROOT)))


# --- the site


def test_the_site_builds_strictly(tmp_path):
    """mkdocs --strict fails on a page missing from the nav, a nav entry or link to nothing, a bad anchor."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                             "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_links_only_to_docs_pages_that_exist():
    from markdown.extensions.toc import slugify

    text = README.read_text()
    links = re.findall(r"\]\((docs/[^)\s]*)\)", text)
    assert len(links) >= 10, f"the README should lead to the guide's pages, found {links}"
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        if not target.is_file() or target.suffix not in {".md", ".png"}:
            broken.append(link)
        elif anchor:
            headings = re.findall(r"^#+\s+(.*?)\s*$", target.read_text(), flags=re.M)
            if anchor not in {slugify(heading, "-") for heading in headings}:
                broken.append(link)
    assert not broken, f"README.md links to docs pages or anchors that do not exist: {broken}"


def test_the_configuration_reference_names_every_setting():
    """Every declared setting, general or of a built-in backend or storage, is in docs/configuration.md."""
    from statekit.backends.heap.options import OPTIONS as HEAP
    from statekit.backends.lmdb.options import OPTIONS as LMDB
    from statekit.backends.rocksdb.options import OPTIONS as ROCKSDB
    from statekit.spark.conf import SETTINGS
    from statekit.storage.filesystem import OPTIONS as FILESYSTEM
    from statekit.storage.memory import OPTIONS as JOBMANAGER

    reference = (DOCS / "configuration.md").read_text()
    declared = [option_set.setting(name) for option_set in (SETTINGS, HEAP, ROCKSDB, LMDB, FILESYSTEM, JOBMANAGER)
                for name in option_set.options]
    assert len(declared) > 30
    missing = [setting for setting in declared if f"`{setting}`" not in reference]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"


def test_sessions_built_in_the_docs_and_examples_show_no_console_progress_bars():
    """A script started with ``python`` gets Spark's console progress bar unless its session turns it
    off; statekit's snippets and examples do (a Connect client shows none unless asked)."""
    sources = [*pages(), *sorted((ROOT / "examples").rglob("*.py"))]
    builders = [(path, text) for path in sources
                for text in re.findall(r"SparkSession\.builder(?!\.remote)[^\n]*(?:\n\s+\.[^\n]*)*", path.read_text())]
    assert len(builders) >= 6
    noisy = [str(path.relative_to(ROOT)) for path, text in builders if "spark.ui.showConsoleProgress" not in text]
    assert not noisy, f"set .config('spark.ui.showConsoleProgress', 'false') in the session builders of {noisy}"


# --- the code blocks


def test_the_docs_mark_their_complete_programs():
    """The marker is found (a typo in it would silently turn every program into a fragment), and only
    on blocks this test knows how to run."""
    marked = [block for block in all_blocks() if block.run]
    assert sum(block.page == README for block in marked) >= 1
    assert len(marked) >= 12, [block.where for block in marked]
    assert not [block.where for block in marked if block.lang not in {"python", "sh"}]
    stray = [f"{page.relative_to(ROOT)}" for page in pages()
             if sum(line.strip() == MARK for line in page.read_text().splitlines())
             != sum(1 for block in code_blocks(page) if block.run)]
    assert not stray, f"a {MARK} marker that is not right before a code fence: {stray}"


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_every_python_block_compiles(page):
    failures = []
    for block in code_blocks(page):
        if block.lang == "python":
            try:
                compile(block.code, block.where, "exec")
            except SyntaxError as error:
                failures.append(f"{block.where}: {error}")
    assert not failures, "\n".join(failures)


def _command_lines(block: Block) -> list[str]:
    """The block's command lines, continuation lines joined and ``$`` prompts removed."""
    joined, current = [], ""
    for line in block.code.splitlines():
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        joined.append(current.strip().removeprefix("$ "))
        current = ""
    return [line for line in joined if line]


def test_every_statekit_command_line_parses():
    from statekit.cli import build_parser

    failures, checked = [], 0
    for block in all_blocks():
        if block.lang not in {"sh", "console", "bash"}:
            continue
        for line in _command_lines(block):
            argv = shlex.split(line, comments=True)
            if not argv or argv[0] != "statekit":
                continue
            checked += 1
            try:
                build_parser().parse_args(argv[1:])
            except SystemExit as stop:
                if stop.code not in (0, None):
                    failures.append(f"{block.where}: {line}")
    assert checked >= 4
    assert not failures, "command lines the statekit CLI refuses:\n" + "\n".join(failures)


@pytest.mark.parametrize("page,blocks", [_page_param(page, blocks) for page, blocks in programs_to_run().items()])
def test_complete_programs_run(page, blocks, tmp_path):
    env = short_job_env(PYTHONPATH=str(ROOT / "src"), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # this environment's statekit command
    for number, block in enumerate(blocks, start=1):
        script = tmp_path / f"program-{number}.{'py' if block.lang == 'python' else 'sh'}"
        script.write_text(block.code)
        command = [sys.executable, str(script)] if block.lang == "python" else ["bash", "-e", str(script)]
        timeout = TIMEOUT["spark" if block.uses_spark else "plain"]
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, (f"the program at {block.where} exited with {result.returncode}\n"
                                        f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-5000:]}")
