"""A small tmpfs mounted for one test: a real full disk (ENOSPC) or a real read-only file system
without touching the machine's own file systems. Needs mount privileges (root in a container);
where the mount is refused the test is skipped, naming why."""
from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def _mount(*arguments: str) -> None:
    subprocess.run(["mount", *arguments], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def mounted_tmpfs(directory: Path, size: str = "2m") -> Iterator[Path]:
    """``directory`` (created) with a tmpfs of ``size`` mounted on it, unmounted afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory))
    except (OSError, subprocess.CalledProcessError) as exc:
        reason = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
        pytest.skip(f"cannot mount a {size} tmpfs for a real full or read-only file system: {reason}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False, capture_output=True)


def remount_read_only(directory: Path) -> None:
    """Make the tmpfs mounted on ``directory`` read-only (EROFS for every write, root's too)."""
    _mount("-o", "remount,ro", str(directory))
