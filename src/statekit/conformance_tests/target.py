"""What a one-command run tests: a backend and a checkpoint storage, named as the
``spark.statekit.backend`` and ``spark.statekit.checkpoint.storage`` settings name them (a
built-in, an entry point or ``module:Class``), with their options, which go through the same
parser as Spark conf (``StatekitConf``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from statekit.registry import backend_class, storage_class
from statekit.spi.backend import StateBackend
from statekit.spi.errors import ConfigurationError
from statekit.spi.storage import CheckpointStorage

DEFAULT_STORAGE = "filesystem"
#: where ``check`` points a storage that takes a directory (nothing is written there)
_CHECK_DIR = "memory://statekit-conformance-check"


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

    def checkpoint_settings(self, checkpoint_dir: str) -> dict[str, str]:
        """The ``spark.statekit.*`` settings that select the storage, checkpointing to ``checkpoint_dir``
        when it takes a directory."""
        directory = {"checkpoint.dir": checkpoint_dir} if self.storage_class().takes_directory else {}
        return {"checkpoint.storage": self.storage, **directory,
                **{f"checkpoint.{self.storage}.{k}": v for k, v in self.storage_options.items()}}

    def create_storage(self, checkpoint_dir: str) -> CheckpointStorage:
        """The storage, built exactly as ``spark.statekit.*`` settings build it."""
        from statekit.spark.conf import StatekitConf

        return StatekitConf.parse(self.checkpoint_settings(checkpoint_dir)).create_storage()

    def storage_knobs(self) -> tuple[bool | None, bool | None, bool]:
        """``writes_files``, ``shared_files`` and ``durable`` of the storage level (see
        ``storage.StorageTestBase``); a plugin storage decides per written handle and must be durable."""
        from statekit.storage.filesystem import FileSystemCheckpointStorage
        from statekit.storage.memory import JobManagerCheckpointStorage

        cls = self.storage_class()
        if issubclass(cls, JobManagerCheckpointStorage):
            return False, False, cls.durable
        if issubclass(cls, FileSystemCheckpointStorage):
            return True, True, cls.durable
        return None, None, cls.durable

    def check(self) -> None:
        """Resolve both names and parse every option now, as Spark conf would, so that a wrong name
        or option fails the run at once rather than every test."""
        from statekit.spark.conf import StatekitConf

        self.backend_class()  # wrong names are reported as the command's own options
        self.storage_class()
        StatekitConf.parse({**self.backend_settings(), **self.checkpoint_settings(_CHECK_DIR)})
