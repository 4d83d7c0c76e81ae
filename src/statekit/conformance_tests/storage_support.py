"""What the conformance suite needs from a checkpoint storage beyond its contract, supplied by the
storage's author without subclassing any test (as SQLAlchemy's dialect suite takes a dialect's
requirements class): a fresh, empty location for every test, a location the storage cannot
write, and access to stored bytes so the suite can damage them.

A storage names its support class in ``CheckpointStorage.test_support`` (``"module:Class"``);
without one it gets ``StorageTestSupport`` itself, which gives a storage that declares
``takes_directory`` a fresh ``spark.statekit.checkpoint.dir`` per test and one that is a regular
file as its unwritable location, and finds no stored bytes (the tests that damage bytes then
skip, saying that a ``locate`` is missing).

Locations are ``spark.statekit.*`` settings without the prefix, as Spark conf gives them, so the
one command builds the storage exactly as a job does.
"""
from __future__ import annotations

import importlib
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statekit.spi.errors import ConfigurationError
from statekit.spi.handles import FileStateHandle, StreamStateHandle
from statekit.spi.storage import CheckpointStorage

if TYPE_CHECKING:
    import fsspec


@dataclass(frozen=True)
class StorageLocation:
    """Where a storage keeps checkpoints, as settings give it: ``directory`` is
    ``spark.statekit.checkpoint.dir`` (for a storage that ``takes_directory``), ``options`` are the
    storage's own (``spark.statekit.checkpoint.<name>.<option>``)."""

    directory: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    def create(self, storage_class: type[CheckpointStorage]) -> CheckpointStorage:
        return storage_class.from_settings(self.directory, self.options)


class StorageTestSupport:
    """The default support; subclass it and override what your storage needs."""

    def __init__(self, storage_class: type[CheckpointStorage]) -> None:
        self.storage_class = storage_class

    # --- locations
    def fresh_location(self, work: Path) -> StorageLocation:
        """An empty location of the storage, given ``work``, an empty local directory of the
        test's own. Default: a directory in it when the storage takes a directory, no location
        otherwise (a storage such as driver memory, which starts empty)."""
        if self.storage_class.takes_directory:
            return StorageLocation((work / "checkpoints").as_uri())
        return StorageLocation()

    def unwritable_location(self, work: Path) -> tuple[StorageLocation, str] | None:
        """A location the storage cannot write, and the setting its error must name; None when
        the storage has no location to get wrong (the test then skips saying so). Default for a
        storage that takes a directory: a "directory" that is an existing regular file (fails for
        root too, unlike permissions)."""
        if not self.storage_class.takes_directory:
            return None
        blocker = work / "not-a-directory"
        blocker.write_bytes(b"a file where a directory is expected")
        return StorageLocation(blocker.as_uri()), "spark.statekit.checkpoint.dir"

    # --- stored bytes
    def locate(self, storage: CheckpointStorage, job_id: str,
               handle: StreamStateHandle) -> tuple[fsspec.AbstractFileSystem, str] | None:
        """The fsspec file system and path holding ``handle``'s bytes, written through
        ``storage.create_access(job_id)``; None when they are not in a file of their own. A storage
        that keeps bytes elsewhere overrides ``corrupt``, ``truncate`` and ``delete`` instead."""
        return None

    def corrupt(self, storage: CheckpointStorage, job_id: str, handle: StreamStateHandle,
                offset: int | None = None) -> str | None:
        """Flip one byte of the stored stream (the middle one by default); return the name its
        errors must give (the file's path), or None when there is nothing to damage."""
        found = self.locate(storage, job_id, handle)
        if found is None:
            return None
        fs, path = found
        data = bytearray(fs.cat_file(path))
        data[len(data) // 2 if offset is None else offset] ^= 0xFF
        fs.pipe_file(path, bytes(data))
        return path

    def truncate(self, storage: CheckpointStorage, job_id: str, handle: StreamStateHandle) -> str | None:
        """Cut the stored stream to half its size; return its name (see ``corrupt``)."""
        found = self.locate(storage, job_id, handle)
        if found is None:
            return None
        fs, path = found
        data = fs.cat_file(path)
        fs.pipe_file(path, data[: len(data) // 2])
        return path

    def delete(self, storage: CheckpointStorage, job_id: str, handle: StreamStateHandle) -> str | None:
        """Remove the stored stream; return its name (see ``corrupt``)."""
        found = self.locate(storage, job_id, handle)
        if found is None:
            return None
        fs, path = found
        fs.rm_file(path)
        return path


class FileSystemTestSupport(StorageTestSupport):
    """The ``filesystem`` storage's support: a file handle's path is relative to the job directory
    ``<checkpoint-dir>/<job-id>`` (``statekit.storage.layout``)."""

    def locate(self, storage: CheckpointStorage, job_id: str,
               handle: StreamStateHandle) -> tuple[fsspec.AbstractFileSystem, str] | None:
        if not isinstance(handle, FileStateHandle):
            return None
        import fsspec

        files: Any = storage  # a FileSystemCheckpointStorage
        fs, root = fsspec.core.url_to_fs(files.checkpoint_dir, **files.storage_options)
        return fs, posixpath.join(root.rstrip("/"), job_id, handle.path)


def support_for(storage_class: type[CheckpointStorage]) -> StorageTestSupport:
    """The test support ``storage_class`` declares (``test_support``), or the default one."""
    name = storage_class.test_support
    if name is None:
        return StorageTestSupport(storage_class)
    module, _, attribute = name.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"{storage_class.__name__}.test_support={name!r} cannot be loaded ({exc}); "
                                 f"name a StorageTestSupport subclass as 'module:Class'") from exc
    if not (isinstance(cls, type) and issubclass(cls, StorageTestSupport)):
        raise ConfigurationError(f"{storage_class.__name__}.test_support={name!r} is not a subclass of "
                                 f"statekit.conformance_tests.storage_support.StorageTestSupport")
    return cls(storage_class)
