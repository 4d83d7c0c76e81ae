"""Recording what reaches the disk: every ``os.fsync`` (by the path its descriptor was opened with)
and every rename (by its target), in order, for tests of the durability of local files."""
from __future__ import annotations

import os

import pytest


def record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """From now on, ``("fsync", path)`` and ``("rename", target)`` events, real paths, in the order
    they happen (``os.open`` maps descriptors to paths: statekit syncs through it)."""
    opened: dict[int, str] = {}
    events: list[tuple[str, str]] = []
    real_open, real_fsync = os.open, os.fsync

    def recording_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        opened[fd] = os.path.realpath(path)
        return fd

    def recording_fsync(fd):
        events.append(("fsync", opened.get(fd, f"fd {fd}")))
        real_fsync(fd)

    def recording(rename):
        def recording_rename(source, target, *args, **kwargs):
            events.append(("rename", os.path.realpath(target)))
            rename(source, target, *args, **kwargs)
        return recording_rename

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording(os.replace))
    monkeypatch.setattr(os, "rename", recording(os.rename))
    return events
