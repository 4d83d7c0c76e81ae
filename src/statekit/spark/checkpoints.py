"""The latest completed checkpoint of a Spark job, read on the driver (any storage, including
``jobmanager``, whose checkpoints live in the driver's memory)."""
from __future__ import annotations

from pyspark.sql import SparkSession

from statekit.checkpoint.store import CheckpointStore, CompletedCheckpoint
from statekit.spark.conf import StatekitConf
from statekit.spi.errors import RestoreError
from statekit.spi.storage import CheckpointStorage, CheckpointStorageAccess, CheckpointStreams

_DRIVER_MEMORY_ACCESSES: dict[str, CheckpointStorageAccess] = {}


def driver_access(storage: CheckpointStorage, job_id: str) -> CheckpointStorageAccess:
    """The job's storage access; for a storage that is not durable (``jobmanager``) one per job
    for the life of the driver process, since its checkpoints live in that access's memory."""
    if storage.durable:
        return storage.create_access(job_id)
    access = _DRIVER_MEMORY_ACCESSES.get(job_id)
    if access is None:
        access = _DRIVER_MEMORY_ACCESSES[job_id] = storage.create_access(job_id)
    return access


def latest_checkpoint(spark: SparkSession, job_id: str,
                      conf: StatekitConf | None = None) -> tuple[CompletedCheckpoint, CheckpointStreams]:
    """``job_id``'s latest completed checkpoint and the streams that read its state, from the
    storage ``spark.statekit.*`` selects (or ``conf``)."""
    conf = conf or StatekitConf.from_spark(spark.conf)
    access = driver_access(conf.create_storage(), job_id)
    latest = CheckpointStore(access, conf.num_retained).latest()
    if latest is None:
        raise RestoreError(f"job {job_id!r} has no completed checkpoint")
    return latest, access.restore_streams()
