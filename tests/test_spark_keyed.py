"""The Spark runner on bounded DataFrames: selection by conf, one checkpoint per call, restore,
rescale and backend switch, every key compared with a failure-free oracle."""
import pytest

from statekit.checkpoint.metadata import CheckpointMetadata
from statekit.conformance_tests.workload import dump_state, expected_key_state, make_rows, oracle
from statekit.conformance_tests.workload import WorkloadFunction
from statekit.spark import StatekitConf, process_keyed
from statekit.spi import ConfigurationError
from statekit.storage.filesystem import resolve

pytestmark = pytest.mark.spark
SCHEMA = "key string, category string, amount long"


def _ordered(spark, rows):
    """A DataFrame of ``rows`` in list order (one partition): the oracle applies rows in order."""
    return spark.createDataFrame(rows, SCHEMA).coalesce(1)


def _run(spark, rows, job_id):
    df = _ordered(spark, rows)
    return process_keyed(df, "key", WorkloadFunction(), "key string, count long", job_id=job_id).collect()


@pytest.mark.parametrize("backend,storage", [("heap", "jobmanager"), ("heap", "filesystem"),
                                             ("rocksdb", "filesystem"), ("lmdb", "filesystem")])
def test_checkpoints_restore_and_rescale_by_conf(spark, statekit_settings, tmp_path, backend, storage):
    checkpoints = f"file://{tmp_path}/checkpoints"
    statekit_settings({"backend": backend, "checkpoint.storage": storage, "checkpoint.dir": checkpoints,
                     "checkpoint.incremental": "true", "parallelism": 4, "max-parallelism": 128,
                     "local.dir": str(tmp_path / "local")})
    job = f"spark-{backend}-{storage}"
    epochs = [make_rows(1500, 300, seed) for seed in (11, 12, 13)]
    first = _run(spark, epochs[0], job)
    want = oracle(epochs[0])
    assert len(first) == len(epochs[0])
    assert {r["key"]: max(c for k, c in [(x["key"], x["count"]) for x in first] if k == r["key"]) for r in first} \
        == {k: v["count"] for k, v in want.items()}
    spark.conf.set("spark.statekit.parallelism", "3")  # rescale 4 -> 3
    _run(spark, epochs[1], job)
    spark.conf.set("spark.statekit.parallelism", "8")  # and 3 -> 8
    last = _run(spark, epochs[2], job)
    want = oracle(epochs[0] + epochs[1] + epochs[2])
    counts = {}
    for r in last:
        counts[r["key"]] = max(counts.get(r["key"], 0), r["count"])
    assert counts == {k: want[k]["count"] for k in counts}
    if storage == "filesystem":
        resolved = resolve(f"{checkpoints}/{job}")
        metadata = CheckpointMetadata.from_bytes(resolved.metadata)
        assert metadata.checkpoint_id == 3 and metadata.operators["keyed-process"].parallelism == 8
        found = dump_state(metadata, resolved.streams, str(tmp_path / "dump"),
                           state_backend=StatekitConf.parse({"backend": backend,
                                                             "local.dir": str(tmp_path / "d")}).create_backend())
        assert found == {k: expected_key_state(v) for k, v in want.items()}


def test_invalid_conf_fails_before_any_job(spark, statekit_settings):
    statekit_settings(backend="nosuch")
    df = spark.createDataFrame(make_rows(10, 5, 1), SCHEMA)
    with pytest.raises(ConfigurationError, match=r"spark\.statekit\.backend='nosuch' is unknown; accepted: heap"):
        process_keyed(df, "key", WorkloadFunction(), "key string, count long", job_id="bad")


@pytest.mark.parametrize("settings,message", [
    ({"checkpoint.storage": "filesystem"}, r"needs spark\.statekit\.checkpoint\.dir"),
    ({"parallelism": "zero"}, r"spark\.statekit\.parallelism must be a positive integer"),
    ({"checkpoint.incremental": "maybe"}, r"spark\.statekit\.checkpoint\.incremental must be true or false"),
    ({"restore.mode": "steal"}, r"spark\.statekit\.restore\.mode must be one of"),
    ({"backend.rocksdb.compression": "brotli", "backend": "rocksdb"}, r"compression must be one of"),
    ({"chekpoint.dir": "/tmp"}, r"unknown setting spark\.statekit\.chekpoint\.dir"),
])
def test_conf_errors_name_the_setting(settings, message):
    with pytest.raises(ConfigurationError, match=message):
        StatekitConf.parse(settings)


def test_job_id_comes_from_conf(spark, statekit_settings):
    statekit_settings({"job-id": "from-conf", "parallelism": 2})
    df = spark.createDataFrame(make_rows(50, 10, 3), SCHEMA)
    process_keyed(df, "key", WorkloadFunction(), "key string, count long").collect()
    from statekit.spark.keyed import _DRIVER_MEMORY_ACCESSES
    assert _DRIVER_MEMORY_ACCESSES["from-conf"].latest_completed().checkpoint_id == 1
