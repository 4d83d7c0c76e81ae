"""``spark.statekit.*`` configuration, validated on the driver before any job runs.

Every setting is declared once in ``SETTINGS`` (``statekit.spi.options``); the options of the
selected backend (``spark.statekit.backend.<name>.*``) and storage
(``spark.statekit.checkpoint.<name>.*``) are parsed by the backend's and the storage's own
declarations when they are built here. Options of backends other than the selected one are
ignored (a backend switch through a savepoint leaves them set); options of another storage are
an error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from statekit.checkpoint.ownership import TAKE_OVER_SETTING
from statekit.checkpoint.signing import SIGNING_ENV, SIGNING_SETTING
from statekit.checkpoint.store import DEFAULT_NUM_RETAINED, RestoreMode
from statekit.registry import backend_class, storage_class
from statekit.runtime.event_time import duration_ms
from statekit.runtime.local_recovery import DEFAULT_RETENTION_SECONDS
from statekit.runtime.sink_coordinator import IGNORE_LOST_SETTING, RetryPolicy
from statekit.runtime.task import DEFAULT_TTL_SWEEP_SECONDS
from statekit.spi.backend import SnapshotFormat, StateBackend
from statekit.spi.errors import ConfigurationError
from statekit.spi.key_groups import UPPER_BOUND_MAX_PARALLELISM, check_parallelism
from statekit.spi.names import check_job_id
from statekit.spi.options import Option, OptionSet, boolean, choice, integer, local_directory, number, size, text
from statekit.spi.serializer import TRUST_SETTING
from statekit.spi.storage import CheckpointStorage

PREFIX = "spark.statekit."
#: a KeyedBatchFunction's input is grouped by key in batches of up to this many bytes (Arrow)
DEFAULT_BATCH_MAX_BYTES = 64 << 20
#: the most bytes (Arrow) of broadcast rows an epoch of a broadcast job sends to every subtask
DEFAULT_BROADCAST_MAX_BYTES = 16 << 20
_BUILT_FROM_NAMES = "a built-in name, an entry-point name or module:Class"


def _job_id(value: Any, setting: str) -> str:
    return check_job_id(text(value, setting), setting)


def _seconds(value: Any, setting: str) -> float:
    """A duration (``"7 days"``, ``"12 hours"``, a ``timedelta``) in seconds."""
    return duration_ms(value, setting) / 1000


SETTINGS = OptionSet(
    PREFIX,
    Option("backend", text, "heap", f"the state backend: heap, rocksdb, lmdb, {_BUILT_FROM_NAMES}"),
    Option("checkpoint.storage", text, "jobmanager", f"the checkpoint storage: jobmanager, filesystem, "
                                                     f"{_BUILT_FROM_NAMES}"),
    Option("checkpoint.dir", text, None, "the checkpoint directory URL of a storage that takes one (filesystem)"),
    Option("checkpoint.incremental", boolean, False, "incremental checkpoints, where the backend supports them"),
    Option("checkpoint.format", choice(*(f.value for f in SnapshotFormat)), SnapshotFormat.CANONICAL.value,
           "the format of full checkpoints: canonical (read by every backend) or native (the backend's own files, "
           "where it supports them: heap, rocksdb, lmdb)"),
    Option("checkpoint.num-retained", integer(minimum=1, maximum=10_000), DEFAULT_NUM_RETAINED,
           "completed checkpoints kept per job"),
    Option("parallelism", integer(minimum=1, maximum=UPPER_BOUND_MAX_PARALLELISM), None,
           "subtasks per epoch (default: the last checkpoint's, else Spark's default parallelism)"),
    Option("max-parallelism", integer(minimum=1, maximum=UPPER_BOUND_MAX_PARALLELISM), None,
           "key groups, fixed for the life of a job"),
    Option("savepoint.dir", text, None, "where statekit.spark.savepoint writes savepoints (a directory URL)"),
    Option("restore.path", text, None, "a checkpoint or savepoint to start from"),
    Option("restore.mode", choice(*(m.value for m in RestoreMode)), RestoreMode.NO_CLAIM.value,
           "no-claim: never delete the restored snapshot's files; claim: the job owns them"),
    Option(SIGNING_SETTING[len(PREFIX):], text, None,
           f"a secret that signs the job's checkpoints and savepoints and must have signed what it restores "
           f"(default: the environment variable {SIGNING_ENV}); redacted by Spark"),
    Option(TRUST_SETTING[len(PREFIX):], boolean, False,
           "restore state that runs code when it is read (pickle: PickleSerializer, the heap's native format) "
           "from checkpoints you trust the writers of"),
    Option("local.dir", local_directory, None, "executor-local directory of working state"),
    Option("local.retention", _seconds, DEFAULT_RETENTION_SECONDS,
           "how long working state no task used stays on an executor's disk (e.g. '7 days')"),
    Option("job-id", _job_id, None, "the job's name in the checkpoint directory (default: the application name)"),
    Option(TAKE_OVER_SETTING[len(PREFIX):], boolean, False,
           "let this run continue a job whose checkpoints another query or kind of job wrote"),
    Option("batch.max-bytes", size(maximum=2 << 30), DEFAULT_BATCH_MAX_BYTES,
           "a KeyedBatchFunction's input batches (Arrow bytes)"),
    Option("broadcast.max-bytes", size(maximum=1 << 30), DEFAULT_BROADCAST_MAX_BYTES,
           "the broadcast rows (Arrow bytes) an epoch of a broadcast job sends to every subtask"),
    Option("ttl.sweep-seconds", number(minimum=0, maximum=3600), DEFAULT_TTL_SWEEP_SECONDS,
           "time each subtask spends per epoch removing expired TTL entries (0: only on access and in "
           "full snapshots)"),
    Option("sink.commit-attempts", integer(minimum=1, maximum=100), RetryPolicy.attempts,
           "tries of a transactional sink's commit (or publication) that fails with a transient error"),
    Option(IGNORE_LOST_SETTING[len(PREFIX):], boolean, False,
           "continue when a sink's target lost a pre-committed transaction (its rows are dropped, with an error "
           "in the log)"),
    Option("metrics.enabled", boolean, True,
           "collect each epoch's metrics, record them with its checkpoint, log them and show them in a streaming "
           "query's progress"),
)


@dataclass(frozen=True)
class StatekitConf:
    backend: str = "heap"
    backend_options: dict[str, str] = field(default_factory=dict)
    storage: str = "jobmanager"
    storage_options: dict[str, str] = field(default_factory=dict)
    checkpoint_dir: str | None = None
    incremental: bool = False
    checkpoint_format: SnapshotFormat = SnapshotFormat.CANONICAL
    num_retained: int = DEFAULT_NUM_RETAINED
    parallelism: int | None = None
    max_parallelism: int | None = None
    savepoint_dir: str | None = None
    restore_path: str | None = None
    restore_mode: RestoreMode = RestoreMode.NO_CLAIM
    local_dir: str | None = None
    local_retention_seconds: float = DEFAULT_RETENTION_SECONDS
    job_id: str | None = None
    take_over: bool = False
    batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES
    broadcast_max_bytes: int = DEFAULT_BROADCAST_MAX_BYTES
    ttl_sweep_seconds: float = DEFAULT_TTL_SWEEP_SECONDS
    sink_commit_attempts: int = RetryPolicy.attempts
    sink_ignore_lost: bool = False
    trust_pickle: bool = False
    signing_secret: str | None = field(default=None, repr=False)
    metrics_enabled: bool = True

    @classmethod
    def from_spark(cls, conf: Any) -> "StatekitConf":
        """From a SparkSession's runtime conf (``spark.conf``, PySpark 4+) or a mapping of settings."""
        items = conf.getAll if hasattr(conf, "getAll") and not callable(conf.getAll) else dict(conf)
        return cls.parse({k[len(PREFIX):]: v for k, v in items.items() if k.startswith(PREFIX)})

    @classmethod
    def parse(cls, settings: Mapping[str, Any]) -> "StatekitConf":
        """From settings named without the ``spark.statekit.`` prefix; every value is checked now."""
        general = {k: v for k, v in settings.items() if not _is_component_option(k)}
        values = SETTINGS.parse(general)
        backend, storage = values["backend"], values["checkpoint.storage"]
        backend_options, storage_options = {}, {}
        for key, value in settings.items():
            if key.startswith(f"backend.{backend}."):
                backend_options[key[len(f"backend.{backend}."):]] = value
            elif key.startswith(f"checkpoint.{storage}."):
                storage_options[key[len(f"checkpoint.{storage}."):]] = value
            elif _is_component_option(key) and key.startswith("checkpoint."):
                raise ConfigurationError(f"{PREFIX}{key} is an option of another checkpoint storage; "
                                         f"{PREFIX}checkpoint.storage={storage} takes options "
                                         f"{PREFIX}checkpoint.{storage}.*: remove it or select that storage")
        conf = cls(
            backend=backend, backend_options=backend_options, storage=storage, storage_options=storage_options,
            checkpoint_dir=values["checkpoint.dir"], incremental=values["checkpoint.incremental"],
            checkpoint_format=SnapshotFormat(values["checkpoint.format"]),
            num_retained=values["checkpoint.num-retained"], parallelism=values["parallelism"],
            max_parallelism=values["max-parallelism"], savepoint_dir=values["savepoint.dir"],
            restore_path=values["restore.path"], restore_mode=RestoreMode(values["restore.mode"]),
            local_dir=values["local.dir"], local_retention_seconds=values["local.retention"], job_id=values["job-id"],
            take_over=values[TAKE_OVER_SETTING[len(PREFIX):]], batch_max_bytes=values["batch.max-bytes"],
            broadcast_max_bytes=values["broadcast.max-bytes"],
            ttl_sweep_seconds=values["ttl.sweep-seconds"], sink_commit_attempts=values["sink.commit-attempts"],
            sink_ignore_lost=values[IGNORE_LOST_SETTING[len(PREFIX):]], trust_pickle=values[TRUST_SETTING[len(PREFIX):]],
            signing_secret=values[SIGNING_SETTING[len(PREFIX):]], metrics_enabled=values["metrics.enabled"])
        conf.create_backend()  # resolves the names and parses every option now, before a job runs
        conf.create_storage()
        if conf.parallelism is not None and conf.max_parallelism is not None:
            check_parallelism(conf.parallelism, conf.max_parallelism)
        return conf

    def create_backend(self) -> StateBackend:
        cls = backend_class(self.backend, PREFIX + "backend")
        options = dict(self.backend_options)
        if self.local_dir and cls.local_dir_option:
            options.setdefault(cls.local_dir_option, self.local_dir)
        return cls(**options)

    def create_storage(self) -> CheckpointStorage:
        cls = storage_class(self.storage, PREFIX + "checkpoint.storage")
        if not cls.takes_directory:
            if self.checkpoint_dir:
                raise ConfigurationError(
                    f"{PREFIX}checkpoint.dir={self.checkpoint_dir!r} is set, but {PREFIX}checkpoint.storage="
                    f"{self.storage} takes no directory{_and_keeps_state_in_memory(cls)}: set {PREFIX}"
                    f"checkpoint.storage=filesystem to checkpoint to that directory, or remove {PREFIX}checkpoint.dir")
        elif not self.checkpoint_dir:
            raise ConfigurationError(f"{PREFIX}checkpoint.storage={self.storage} needs {PREFIX}checkpoint.dir "
                                     f"(a directory URL such as file:///data/checkpoints or s3://bucket/chk)")
        return cls.from_settings(self.checkpoint_dir, self.storage_options)


def _is_component_option(key: str) -> bool:
    """A backend's or a storage's own option (``backend.<name>.<option>``, ``checkpoint.<name>.<option>``);
    anything else, ``checkpoint.num-retaned`` say, is a general setting (known or not)."""
    return key.startswith(("backend.", "checkpoint.")) and key.count(".") >= 2


def _and_keeps_state_in_memory(cls: type[CheckpointStorage]) -> str:
    return "" if cls.durable else " and keeps checkpoints in driver memory only (lost when the driver stops)"
