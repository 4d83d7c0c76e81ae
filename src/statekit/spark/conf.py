"""``spark.statekit.*`` configuration, validated on the driver before any job runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from statekit.backends.common.option_values import parse_bool, parse_size
from statekit.checkpoint.store import DEFAULT_NUM_RETAINED, RestoreMode
from statekit.plugins import available_backends, available_storages, backend_class, storage_class
from statekit.spi.backend import StateBackend
from statekit.spi.errors import ConfigurationError
from statekit.spi.key_groups import check_parallelism
from statekit.spi.storage import CheckpointStorage

PREFIX = "spark.statekit."
KNOWN_KEYS = {
    "backend", "checkpoint.storage", "checkpoint.dir", "checkpoint.incremental", "checkpoint.num-retained",
    "parallelism", "max-parallelism", "savepoint.dir", "restore.path", "restore.mode", "local.dir",
    "job-id",  # the job's name in the checkpoint directory (default: the Spark application name)
    "batch.max-bytes",
}
#: a KeyedBatchFunction's input is grouped by key in batches of up to this many bytes (Arrow)
DEFAULT_BATCH_MAX_BYTES = 64 << 20


def _positive_int(value: Any, key: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigurationError(f"{PREFIX}{key} must be a positive integer, got {value!r}")
    return number


@dataclass(frozen=True)
class StatekitConf:
    backend: str = "heap"
    backend_options: dict[str, str] = field(default_factory=dict)
    storage: str = "jobmanager"
    storage_options: dict[str, str] = field(default_factory=dict)
    checkpoint_dir: str | None = None
    incremental: bool = False
    num_retained: int = DEFAULT_NUM_RETAINED
    parallelism: int | None = None
    max_parallelism: int | None = None
    savepoint_dir: str | None = None
    restore_path: str | None = None
    restore_mode: RestoreMode = RestoreMode.NO_CLAIM
    local_dir: str | None = None
    batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES

    @classmethod
    def from_spark(cls, conf: Any) -> "StatekitConf":
        """From a SparkSession's runtime conf (``spark.conf``, PySpark 4+) or a mapping of settings."""
        items = conf.getAll if hasattr(conf, "getAll") and not callable(conf.getAll) else dict(conf)
        return cls.parse({k[len(PREFIX):]: v for k, v in items.items() if k.startswith(PREFIX)})

    @classmethod
    def parse(cls, settings: Mapping[str, str]) -> "StatekitConf":
        backend = settings.get("backend", "heap")
        storage = settings.get("checkpoint.storage", "jobmanager")
        backend_options = {k[len(f"backend.{backend}."):]: v for k, v in settings.items()
                           if k.startswith(f"backend.{backend}.")}
        storage_options = {k[len(f"checkpoint.{storage}."):]: v for k, v in settings.items()
                           if k.startswith(f"checkpoint.{storage}.")}
        for key in settings:
            if key not in KNOWN_KEYS and not key.startswith(("backend.", f"checkpoint.{storage}.")):
                raise ConfigurationError(f"unknown setting {PREFIX}{key}; known: "
                                         f"{', '.join(PREFIX + k for k in sorted(KNOWN_KEYS))}")
        conf = cls(
            backend=backend, backend_options=backend_options, storage=storage, storage_options=storage_options,
            checkpoint_dir=settings.get("checkpoint.dir"),
            incremental=parse_bool(settings.get("checkpoint.incremental", "false"), PREFIX + "checkpoint.incremental"),
            num_retained=_positive_int(settings.get("checkpoint.num-retained", DEFAULT_NUM_RETAINED),
                                       "checkpoint.num-retained"),
            parallelism=_positive_int(settings["parallelism"], "parallelism") if "parallelism" in settings else None,
            max_parallelism=(_positive_int(settings["max-parallelism"], "max-parallelism")
                             if "max-parallelism" in settings else None),
            savepoint_dir=settings.get("savepoint.dir"), restore_path=settings.get("restore.path"),
            restore_mode=RestoreMode.parse(settings.get("restore.mode", "no-claim")),
            local_dir=settings.get("local.dir"),
            batch_max_bytes=parse_size(settings.get("batch.max-bytes", DEFAULT_BATCH_MAX_BYTES),
                                       PREFIX + "batch.max-bytes"))
        conf.create_backend()  # resolves the names and parses every option now, before a job runs
        conf.create_storage()
        if conf.parallelism is not None:
            check_parallelism(conf.parallelism, conf.max_parallelism)
        return conf

    def create_backend(self) -> StateBackend:
        cls = backend_class(self.backend, PREFIX + "backend")
        options = dict(self.backend_options)
        if self.local_dir and cls.name in ("rocksdb", "lmdb"):
            options.setdefault("local-dir", self.local_dir)
        return cls(**options)

    def create_storage(self) -> CheckpointStorage:
        cls = storage_class(self.storage, PREFIX + "checkpoint.storage")
        if self.storage == "filesystem" or getattr(cls, "name", None) == "filesystem":
            if not self.checkpoint_dir:
                raise ConfigurationError(f"{PREFIX}checkpoint.storage=filesystem needs {PREFIX}checkpoint.dir "
                                         f"(a directory URL such as file:///data/checkpoints or s3://bucket/chk)")
            return cls(self.checkpoint_dir, **self.storage_options)  # type: ignore[call-arg]
        return cls(**self.storage_options)

    @staticmethod
    def accepted() -> str:
        return f"backends: {', '.join(available_backends())}; storages: {', '.join(available_storages())}"
