"""Broken storages that declare themselves smaller than they are, so that the tests they would
fail look inapplicable: files declared inline, shared files and durability declared absent."""
from __future__ import annotations

from broken_storages.ignores_checksums import IgnoresChecksumsStorage
from broken_storages.wrong_root import WrongRootStorage


class InlineClaimingStorage(IgnoresChecksumsStorage):
    """Writes files, reads them without checking, and declares that it keeps every byte inline."""
    name = "inline-claiming"
    writes_files = False


class NonDurableClaimingStorage(WrongRootStorage):
    """Handles relative to the wrong root, declared neither durable nor with shared files."""
    name = "non-durable-claiming"
    durable = False
    shared_files = False
