"""Progress of long operations (savepoint creation and conversion, offline rewrites, reading many
checkpoints): a bar on stderr when it is a terminal and ``rich`` is installed (the ``progress``
extra), nothing otherwise, so logs, pipes and executors stay quiet. ``STATEKIT_PROGRESS=0`` turns
bars off on a terminal too; ``STATEKIT_PROGRESS=1`` shows them without one."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator

#: advance the bar by this much (bytes, or items)
Advance = Callable[[float], None]
ENVIRONMENT = "STATEKIT_PROGRESS"


def _ignore(amount: float) -> None:
    """No bar: nothing to advance."""


def shown() -> bool:
    """Whether bars are drawn: on a terminal, unless ``STATEKIT_PROGRESS`` says otherwise."""
    setting = os.environ.get(ENVIRONMENT)
    if setting in ("0", "1"):
        return setting == "1"
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress(description: str, total: float, unit: str = "bytes") -> Iterator[Advance]:
    """A bar of ``total`` ``unit`` (``bytes`` or items), or nothing; yields how to advance it."""
    if not shown() or total <= 0:
        yield _ignore
        return
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn,
        )
    except ImportError:  # the progress extra is not installed
        yield _ignore
        return
    amount = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    with Progress(TextColumn("{task.description}"), BarColumn(), amount, TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.advance(task, done)
