"""Signed checkpoints: with a signing secret, ``_metadata`` carries an HMAC-SHA256 of its body and
every file a SHA-256 checksum; a checkpoint written or edited without the secret is refused, naming
the file, before any state is read."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import xxhash

from statekit.checkpoint.signing import SIGNING_ENV
from statekit.cli import main as cli
from statekit.registry import backend_class
from statekit.runtime.function import KeyedProcessFunction
from statekit.runtime.local_runner import LocalRunner
from statekit.serializers import PickleSerializer
from statekit.spi import ValueStateDescriptor
from statekit.spi.backend import SnapshotFormat
from statekit.spi.errors import CorruptStateError, UntrustedCheckpointError
from statekit.storage.filesystem import FileSystemCheckpointStorage

SECRET = "correct horse battery staple"


class Count(KeyedProcessFunction):
    def __init__(self, serializer=None):
        self.serializer = serializer

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", self.serializer))

    def process(self, row, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield ctx.current_key, self.count.value()


def runner(tmp_path, job="job", backend="heap", **options):
    return LocalRunner(options.pop("function", Count()), lambda row: row, parallelism=2, job_id=job,
                       state_backend=backend_class(backend)(), local_dir=str(tmp_path / "local" / job),
                       storage=FileSystemCheckpointStorage(str(tmp_path / "checkpoints"), **{"memory-threshold": "0"}),
                       **options)


def metadata_file(tmp_path, job="job", checkpoint=1) -> Path:
    return tmp_path / "checkpoints" / job / f"chk-{checkpoint}" / "_metadata"


def envelope(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    prefix = re.match(rb'(\{.*?"body":)', data).group(1)
    return json.loads(prefix + b"0}"), data[len(prefix):-1]


def rewrite(path: Path, body: bytes) -> None:
    """The metadata with another body, its checksum recomputed (as anyone can), its signature kept."""
    head, _ = envelope(path)
    signature = f'"signature":"{head["signature"]}",' if "signature" in head else ""
    path.write_bytes(f'{{"magic":"{head["magic"]}","version":{head["version"]},"checksum":'
                     f'"{xxhash.xxh3_64_hexdigest(body)}",{signature}"body":'.encode() + body + b"}")


@pytest.mark.parametrize("backend", ["heap", "rocksdb", "lmdb"])
def test_a_signed_job_signs_its_metadata_and_checksums_its_files_with_sha256(backend, tmp_path):
    first = runner(tmp_path, backend=backend, signing_secret=SECRET)
    first.run_epoch(["a", "b", "a"])
    head, body = envelope(metadata_file(tmp_path))
    assert head["version"] == 3 and re.fullmatch("[0-9a-f]{64}", head["signature"])
    checksums = re.findall(rb'"checksum":"([^"]+)"', body)
    assert checksums and all(c.startswith(b"sha256:") for c in checksums), checksums
    second = runner(tmp_path, backend=backend, signing_secret=SECRET)
    assert sorted(second.run_epoch(["a", "c"])) == [("a", 3), ("c", 1)]


def test_an_edited_metadata_is_refused_naming_the_file(tmp_path):
    runner(tmp_path, signing_secret=SECRET).run_epoch(["a"])
    path = metadata_file(tmp_path)
    _, body = envelope(path)
    rewrite(path, body.replace(b'"incremental":false', b'"incremental":false ', 1))
    with pytest.raises(UntrustedCheckpointError, match=rf"{re.escape(str(path))}.*another secret, or edited"):
        runner(tmp_path, signing_secret=SECRET).run_epoch(["a"])


def test_a_file_replaced_with_its_checksum_recomputed_is_refused(tmp_path):
    """A state file changed and its SHA-256 in the metadata recomputed: the body changed, so the
    signature no longer matches; the file changed alone: its checksum no longer does."""
    runner(tmp_path, backend="rocksdb", signing_secret=SECRET, checkpoint_format=SnapshotFormat.NATIVE).run_epoch(
        ["a", "b"])
    path = metadata_file(tmp_path)
    _, body = envelope(path)
    files = [p for p in (tmp_path / "checkpoints" / "job").rglob("*") if p.is_file() and not p.name.startswith("_")]
    target = max(files, key=lambda p: p.stat().st_size)
    old = target.read_bytes()
    new = old[:-1] + bytes([old[-1] ^ 1])
    target.write_bytes(new)
    with pytest.raises(CorruptStateError, match=re.escape(target.name)):
        runner(tmp_path, backend="rocksdb", signing_secret=SECRET).run_epoch(["a"])
    rewrite(path, body.replace(hashlib.sha256(old).hexdigest().encode(), hashlib.sha256(new).hexdigest().encode()))
    assert envelope(path)[1] != body, "the test changed the file's recorded checksum"
    with pytest.raises(UntrustedCheckpointError, match="edited"):
        runner(tmp_path, backend="rocksdb", signing_secret=SECRET).run_epoch(["a"])


def test_unsigned_or_otherwise_signed_checkpoints_are_refused(tmp_path):
    runner(tmp_path, job="unsigned").run_epoch(["a"])
    with pytest.raises(UntrustedCheckpointError, match="is not signed.*savepoint create --sign"):
        runner(tmp_path, job="unsigned", signing_secret=SECRET)
    runner(tmp_path, job="other", signing_secret="another secret").run_epoch(["a"])
    with pytest.raises(UntrustedCheckpointError, match="another secret"):
        runner(tmp_path, job="other", signing_secret=SECRET)
    assert runner(tmp_path, job="other").run_epoch(["a"]) == [("a", 2)], "without a secret, signed metadata reads"


def test_a_signed_checkpoint_is_trusted_with_its_pickles(tmp_path):
    """A verified signature vouches for the writer: pickled state restores without trust-pickle."""
    runner(tmp_path, function=Count(PickleSerializer()), signing_secret=SECRET).run_epoch(["a"])
    again = runner(tmp_path, function=Count(PickleSerializer()), signing_secret=SECRET)
    assert again.run_epoch(["a"]) == [("a", 2)]
    unsigned = runner(tmp_path, job="unsigned", function=Count(PickleSerializer()))
    unsigned.run_epoch(["a"])
    with pytest.raises(UntrustedCheckpointError, match="PickleSerializer"):
        runner(tmp_path, job="unsigned", function=Count(PickleSerializer())).run_epoch(["a"])


def test_the_cli_signs_a_savepoint_of_an_unsigned_checkpoint(tmp_path, monkeypatch, capsys):
    """``savepoint create --sign``: how a job's checkpoints become signed. With the secret in the
    environment the CLI verifies what it reads; a signed job restores from the signed savepoint."""
    runner(tmp_path, job="old").run_epoch(["a", "b"])
    job_dir = str(tmp_path / "checkpoints" / "old")
    assert cli(["savepoint", "create", "--sign", "--from", job_dir, "--to", str(tmp_path / "savepoints")]) == 2
    assert SIGNING_ENV in capsys.readouterr().err
    monkeypatch.setenv(SIGNING_ENV, SECRET)
    assert cli(["state", "get", job_dir, "--state", "count", "--key", "a"]) == 2
    assert "is not signed" in capsys.readouterr().err
    assert cli(["savepoint", "create", "--sign", "--from", job_dir, "--to", str(tmp_path / "savepoints"),
                "--json"]) == 0
    savepoint = json.loads(capsys.readouterr().out)["path"]
    assert cli(["state", "get", savepoint, "--state", "count", "--key", "a"]) == 0
    monkeypatch.delenv(SIGNING_ENV)
    from statekit.storage.pointers import resolve

    resolved = resolve(savepoint)
    signed = runner(tmp_path, job="new", signing_secret=SECRET)
    from statekit.checkpoint.metadata import read_metadata
    from statekit.checkpoint.signing import signing

    with signing(SECRET):
        metadata = read_metadata(resolved.metadata, resolved.pointer)
    signed.restore_from(metadata, resolved.streams)
    assert sorted(signed.run_epoch(["a"])) == [("a", 2)]


@pytest.mark.spark
def test_a_spark_job_signs_its_checkpoints_and_refuses_edited_ones(spark, statekit_settings, tmp_path):
    """The driver signs and verifies; the executors write SHA-256 checksums and check the files they
    restore against them: an edited ``_metadata`` is refused on the driver, a changed file on the
    executor restoring it, each naming the file."""
    import sys

    from pyspark import cloudpickle

    from statekit.spark import process_keyed

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    statekit_settings({"backend": "rocksdb", "checkpoint.storage": "filesystem", "parallelism": 2,
                       "checkpoint.dir": (tmp_path / "checkpoints").as_uri(),
                       "checkpoint.filesystem.memory-threshold": "0", "local.dir": str(tmp_path / "local"),
                       "checkpoint.signing-secret": SECRET})
    users = spark.createDataFrame([("a",), ("b",), ("a",)], "user string")
    process_keyed(users, "user", Count(), "user string, count long", job_id="signed").collect()
    path = metadata_file(tmp_path, "signed")
    head, body = envelope(path)
    checksums = re.findall(rb'"checksum":"([^"]+)"', body)
    assert head["version"] == 3 and checksums and all(c.startswith(b"sha256:") for c in checksums)
    original = path.read_bytes()
    rewrite(path, body.replace(b'"incremental":false', b'"incremental":false ', 1))
    with pytest.raises(UntrustedCheckpointError, match=re.escape(path.name)):
        process_keyed(users, "user", Count(), "user string, count long", job_id="signed")
    path.write_bytes(original)
    target = max((p for p in (tmp_path / "checkpoints" / "signed").rglob("*") if p.is_file()
                  and not p.name.startswith("_")), key=lambda p: p.stat().st_size)
    data = target.read_bytes()
    target.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    statekit_settings({"parallelism": 3})  # a restore from storage, not the executors' working state
    with pytest.raises(Exception, match=re.escape(target.name)):
        process_keyed(users, "user", Count(), "user string, count long", job_id="signed").collect()
    target.write_bytes(data)
    assert sorted(map(tuple, process_keyed(users, "user", Count(), "user string, count long",
                                           job_id="signed").collect())) == [("a", 3), ("a", 4), ("b", 2)]
