"""What a one-command run tests: a backend and a checkpoint storage, named as the
``spark.statekit.backend`` and ``spark.statekit.checkpoint.storage`` settings name them (a
built-in, an entry point or ``module:Class``), with their options, which go through the same
parser as Spark conf (``StatekitConf``)."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from statekit.conformance_tests.storage_support import StorageLocation, StorageTestSupport, support_for
from statekit.registry import backend_class, storage_class
from statekit.spi.backend import StateBackend
from statekit.spi.errors import ConfigurationError
from statekit.spi.storage import CheckpointStorage

DEFAULT_STORAGE = "filesystem"


def parse_pairs(pairs: Sequence[str], option: str) -> dict[str, str]:
    """``["key=value", ...]`` as a dict, or a ConfigurationError naming ``option``."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"{option} takes KEY=VALUE, got {pair!r}")
        parsed[key.strip()] = value
    return parsed


@dataclass(frozen=True)
class SuiteTarget:
    backend: str
    storage: str = DEFAULT_STORAGE
    backend_options: dict[str, str] = field(default_factory=dict)
    storage_options: dict[str, str] = field(default_factory=dict)

    def backend_class(self) -> type[StateBackend]:
        return backend_class(self.backend, "--backend")

    def storage_class(self) -> type[CheckpointStorage]:
        return storage_class(self.storage, "--storage")

    def create_backend(self) -> StateBackend:
        """The backend, built exactly as ``spark.statekit.*`` settings build it."""
        from statekit.spark.conf import StatekitConf

        return StatekitConf.parse(self.backend_settings()).create_backend()

    def backend_settings(self) -> dict[str, str]:
        """The ``spark.statekit.*`` settings (without the prefix) that select the backend."""
        return {"backend": self.backend, **{f"backend.{self.backend}.{k}": v for k, v in self.backend_options.items()}}

    def support(self) -> StorageTestSupport:
        """The storage's test support (``CheckpointStorage.test_support``)."""
        return support_for(self.storage_class())

    def checkpoint_settings(self, work: Path) -> dict[str, str]:
        """The ``spark.statekit.*`` settings that select the storage at a fresh location under
        ``work`` (an empty local directory), as its test support places it."""
        return self.location_settings(self.support().fresh_location(work))

    def location_settings(self, location: StorageLocation) -> dict[str, str]:
        """The ``spark.statekit.*`` settings that select the storage at ``location``; the location's
        options take precedence over the command line's ``--storage-option``s."""
        directory = {"checkpoint.dir": location.directory} if location.directory is not None else {}
        options = {**self.storage_options, **location.options}
        return {"checkpoint.storage": self.storage, **directory,
                **{f"checkpoint.{self.storage}.{k}": v for k, v in options.items()}}

    def create_storage(self, work: Path) -> CheckpointStorage:
        """The storage at a fresh location under ``work``, built exactly as ``spark.statekit.*``
        settings build it."""
        from statekit.spark.conf import StatekitConf

        return StatekitConf.parse(self.checkpoint_settings(work)).create_storage()

    def check(self) -> None:
        """Resolve both names and parse every option now, as Spark conf would, so that a wrong name
        or option fails the run at once rather than every test. The storage is built (not used)
        at a location in a temporary directory."""
        from statekit.spark.conf import StatekitConf

        self.backend_class()  # wrong names are reported as the command's own options
        self.storage_class()
        with tempfile.TemporaryDirectory(prefix="statekit-conformance-check-") as work:
            StatekitConf.parse({**self.backend_settings(), **self.checkpoint_settings(Path(work))})
