"""Progress of long operations (savepoint creation and conversion, offline rewrites, reading many
checkpoints, restores of large state): a bar on stderr when it is a terminal and ``rich`` is
installed (the ``progress`` extra), nothing otherwise, so logs, pipes and executors stay quiet.
``STATEKIT_PROGRESS=0`` turns bars off on a terminal too; ``STATEKIT_PROGRESS=1`` shows them
without one. One bar at a time: an operation inside another's (the restores of a savepoint
conversion) draws none of its own."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import BinaryIO, Callable, Iterator

from statekit.spi.storage import CheckpointOutputStream, CheckpointStreams, StateScope
from statekit.spi.handles import StreamStateHandle

#: advance the bar by this much (bytes, or items)
Advance = Callable[[float], None]
ENVIRONMENT = "STATEKIT_PROGRESS"
_drawing: list[bool] = []  # a bar is drawn now (rich draws one live display at a time)


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
    if not shown() or total <= 0 or _drawing:
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
        _drawing.append(True)
        try:
            yield lambda done: bar.advance(task, done)
        finally:
            _drawing.pop()


class ProgressStreams(CheckpointStreams):
    """``streams`` whose reads advance a bar by the bytes they read (a restore's progress)."""

    def __init__(self, streams: CheckpointStreams, advance: Advance) -> None:
        self.streams, self._advance = streams, advance

    def create_output(self, scope: StateScope = StateScope.EXCLUSIVE,
                      name: str | None = None) -> CheckpointOutputStream:
        return self.streams.create_output(scope, name)

    def read(self, handle: StreamStateHandle) -> bytes:
        data = self.streams.read(handle)
        self._advance(len(data))
        return data

    def read_range(self, handle: StreamStateHandle, offset: int, length: int) -> bytes:
        data = self.streams.read_range(handle, offset, length)
        self._advance(len(data))
        return data

    def copy_to(self, handle: StreamStateHandle, target: BinaryIO) -> None:
        self.streams.copy_to(handle, target)
        self._advance(handle.size)

    def upload_file(self, path: str, scope: StateScope, name: str, move: bool = False) -> StreamStateHandle:
        return self.streams.upload_file(path, scope, name, move)

    def link_to(self, handle: StreamStateHandle, path: str) -> bool:
        linked = self.streams.link_to(handle, path)
        if linked:
            self._advance(handle.size)
        return linked
