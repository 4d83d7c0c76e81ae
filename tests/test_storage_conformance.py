"""Both checkpoint storages against the storage level of the conformance suite: ``jobmanager``,
and ``filesystem`` on file://, memory:// and s3:// (a moto server on 127.0.0.1)."""
from __future__ import annotations

import os
import uuid
from typing import Iterator

import fsspec
import pytest

from statekit.conformance_tests.s3 import DEFAULT_BUCKET, MotoS3, moto_s3, moto_s3_server  # noqa: F401 (fixture)
from statekit.conformance_tests.storage import StorageTests
from statekit.spi.storage import CheckpointStorage
from statekit.storage.filesystem import FileSystemCheckpointStorage
from statekit.storage.memory import JobManagerCheckpointStorage


class TestJobManagerStorage(StorageTests):
    """Declares writes_files=False (every byte travels inline) and durable=False (driver memory)."""

    @pytest.fixture
    def checkpoint_storage(self) -> CheckpointStorage:
        return JobManagerCheckpointStorage()


class TestLocalFileSystemStorage(StorageTests):
    @pytest.fixture
    def checkpoint_storage(self, tmp_path) -> CheckpointStorage:
        return FileSystemCheckpointStorage((tmp_path / "checkpoints").as_uri())


class TestMemoryFileSystemStorage(StorageTests):
    @pytest.fixture
    def checkpoint_storage(self) -> Iterator[CheckpointStorage]:
        root = f"/statekit-conformance/{uuid.uuid4().hex}"
        yield FileSystemCheckpointStorage(f"memory://{root}")
        fs = fsspec.filesystem("memory")  # one process-global store: leave nothing behind
        if fs.exists(root):
            fs.rm(root, recursive=True)
        leftovers = [p for p in [*fs.store, *fs.pseudo_dirs] if p.startswith(root)]
        assert not leftovers, f"memory:// entries left behind: {leftovers[:5]}"


class TestS3Storage(StorageTests):
    @pytest.fixture
    def checkpoint_storage(self, moto_s3: MotoS3) -> CheckpointStorage:
        return FileSystemCheckpointStorage(f"s3://{DEFAULT_BUCKET}/{uuid.uuid4().hex}",
                                           storage_options=moto_s3.storage_options)

    @pytest.fixture
    def unwritable_checkpoint_storage(self):
        pytest.skip("an object store has no directories to block, and moto enforces no permissions")


def test_moto_fixture_stays_on_loopback_and_restores_the_environment():
    before = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    with moto_s3_server(bucket="env-check") as (endpoint_url, options):
        assert endpoint_url.startswith("http://127.0.0.1:")
        assert options["client_kwargs"]["endpoint_url"] == endpoint_url
        assert os.environ["AWS_ENDPOINT_URL"] == endpoint_url
        fs = fsspec.filesystem("s3", **options)
        fs.pipe_file("env-check/probe", b"ok")
        assert fs.cat_file("env-check/probe") == b"ok"
    assert {k: v for k, v in os.environ.items() if k.startswith("AWS_")} == before
