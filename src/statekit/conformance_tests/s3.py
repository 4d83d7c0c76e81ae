"""A real S3 protocol server for tests: moto on 127.0.0.1, spoken to by s3fs.

Reuse it in a plugin's tests::

    from statekit.conformance_tests.s3 import moto_s3  # a session-scoped pytest fixture

    def test_something(moto_s3):
        endpoint_url, storage_options = moto_s3
        storage = FileSystemCheckpointStorage(f"s3://{DEFAULT_BUCKET}/my-test", storage_options=storage_options)

or, outside pytest, ``with moto_s3_server() as (endpoint_url, storage_options): ...``.

Nothing leaves the machine: the server listens on 127.0.0.1 (a free port), the options point
s3fs at it, and while the server runs the AWS environment variables are set to dummy
credentials and to ``AWS_ENDPOINT_URL`` = the server, so even an S3 client created without
options (e.g. a savepoint URL opened with no storage options) talks to it and never to AWS.
The previous environment is restored afterwards. Needs ``moto[server]`` and ``s3fs``.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator, NamedTuple

import pytest

DEFAULT_BUCKET = "statekit-conformance"
REGION = "us-east-1"
_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",  # never ask 169.254.169.254 for credentials
}
#: variables that could send a client elsewhere or pick other credentials; unset while running
_UNSET = ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL_S3",
          "AWS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


class MotoS3(NamedTuple):
    """What the fixture yields: unpack as ``endpoint_url, storage_options``."""

    endpoint_url: str
    storage_options: dict[str, Any]


@contextlib.contextmanager
def _environment(values: dict[str, str], unset: tuple[str, ...]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in (*values, *unset)}
    try:
        for name in unset:
            os.environ.pop(name, None)
        os.environ.update(values)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _clear_s3fs_cache() -> None:
    """Forget cached s3fs instances: they hold sessions to a server that is about to stop."""
    try:
        import s3fs
    except ImportError:
        return
    s3fs.S3FileSystem.clear_instance_cache()


@contextlib.contextmanager
def moto_s3_server(bucket: str = DEFAULT_BUCKET) -> Iterator[MotoS3]:
    """Start moto's S3 server on 127.0.0.1 (a free port), create ``bucket``, yield
    ``(endpoint_url, storage_options)`` for s3fs, and stop the server afterwards."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"the S3 tests need moto's server and s3fs: pip install 'moto[server]' s3fs ({exc})") from exc

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        if host != "127.0.0.1":
            raise RuntimeError(f"moto listens on {host}, expected 127.0.0.1")
        endpoint_url = f"http://127.0.0.1:{port}"
        with _environment({**_ENV, "AWS_ENDPOINT_URL": endpoint_url}, _UNSET):
            _clear_s3fs_cache()
            boto3.client("s3", endpoint_url=endpoint_url, region_name=REGION, aws_access_key_id="testing",
                         aws_secret_access_key="testing").create_bucket(Bucket=bucket)
            options = {"key": "testing", "secret": "testing",
                       "client_kwargs": {"endpoint_url": endpoint_url, "region_name": REGION}}
            try:
                yield MotoS3(endpoint_url, options)
            finally:
                _clear_s3fs_cache()
    finally:
        server.stop()


_shared: MotoS3 | None = None


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """Session-scoped moto S3 server with bucket ``DEFAULT_BUCKET``; give each test its own prefix.

    Importing this fixture into several test modules defines it once per module; they all share
    the first module's server (it stops when that module's definition is torn down, last)."""
    global _shared
    if _shared is not None:
        yield _shared
        return
    with moto_s3_server() as server:
        _shared = server
        try:
            yield server
        finally:
            _shared = None
