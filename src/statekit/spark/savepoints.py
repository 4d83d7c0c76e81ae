"""Savepoints of a Spark job: the latest completed checkpoint converted to the canonical format
in ``<spark.statekit.savepoint.dir>/savepoint-<job>-<id>/``, restorable by any backend at any
parallelism (set ``spark.statekit.restore.path`` to it)."""
from __future__ import annotations

import tempfile

from pyspark.sql import SparkSession

from statekit.checkpoint.signing import signing
from statekit.runtime.savepoints import write_savepoint
from statekit.runtime.task import restore_trusted
from statekit.spark.checkpoints import latest_checkpoint
from statekit.spark.conf import StatekitConf
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import trusting


def savepoint(spark: SparkSession, job_id: str, conf: StatekitConf | None = None) -> str:
    """Write a savepoint of ``job_id``'s latest completed checkpoint; returns its URL."""
    conf = conf or StatekitConf.from_spark(spark.conf)
    if not conf.savepoint_dir:
        raise ConfigurationError("a savepoint needs spark.statekit.savepoint.dir (a directory URL)")
    with signing(conf.signing_secret):
        latest, streams = latest_checkpoint(spark, job_id, conf)
        backend = conf.create_backend()  # before the location: from there on, a failure discards it
        location = conf.create_storage().savepoint_location(conf.savepoint_dir, f"{job_id}-{latest.checkpoint_id}")
        with tempfile.TemporaryDirectory(prefix="statekit-savepoint-") as local_dir, trusting(
                restore_trusted(conf.trust_pickle, backend, conf.checkpoint_format)):
            _, pointer = write_savepoint(location, latest.metadata, streams, backend, local_dir)
        return pointer.external_pointer
