"""Signed checkpoints: tamper evidence for checkpoint and savepoint directories.

With a signing secret (``spark.statekit.checkpoint.signing-secret``, or the environment variable
``STATEKIT_CHECKPOINT_SIGNING_SECRET``, which keeps it out of Spark's conf), every ``_metadata``
written carries an HMAC-SHA256 of its body, and every file's checksum in it is SHA-256. A job or
tool with the secret refuses a ``_metadata`` that is unsigned, signed with another secret or
edited, and a file whose bytes do not match its SHA-256, before a byte of state is read: whoever
can write the directory but lacks the secret cannot change state unnoticed, nor plant a pickle.
A verified signature is trust (``spi.serializer.trusting``): pickled state in it is read.

Only the driver (and the local runner, the CLI, the state reader) holds the secret; executors
check files against the SHA-256 checksums of metadata the driver verified. The setting's name
ends in ``secret`` so that Spark redacts its value in its UI and logs.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import os
from typing import Iterator

from statekit.spi.handles import cryptographic_checksums
from statekit.spi.serializer import trusting

SIGNING_SETTING = "spark.statekit.checkpoint.signing-secret"
SIGNING_ENV = "STATEKIT_CHECKPOINT_SIGNING_SECRET"
#: (the secret, whether metadata read must carry its signature)
_secret: contextvars.ContextVar[tuple[bytes | None, bool]] = contextvars.ContextVar(
    "statekit_signing_secret", default=(None, False))


@contextlib.contextmanager
def signing(secret: str | None = None, verify: bool = True) -> Iterator[bool]:
    """Sign what is written within this scope, with ``secret`` or else the environment variable's
    (neither: nothing changes), and, ``verify``, refuse what is read unless it carries that
    signature; yields whether a secret is in force. Without ``verify`` (a signed savepoint of an
    unsigned checkpoint), what is read is neither verified nor trusted."""
    chosen = secret or os.environ.get(SIGNING_ENV) or None
    key = chosen.encode("utf-8") if chosen else _secret.get()[0]
    verifying = key is not None and (verify or _secret.get()[1])
    token = _secret.set((key, verifying))
    try:
        with cryptographic_checksums(key is not None, verifying), trusting(verifying):
            yield key is not None
    finally:
        _secret.reset(token)


def signing_key() -> bytes | None:
    """The secret in force (``signing``), or None."""
    return _secret.get()[0]


def verifying_key() -> bytes | None:
    """The secret metadata read must be signed with, or None."""
    key, verify = _secret.get()
    return key if verify else None


def signature(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def signature_matches(key: bytes, body: bytes, recorded: str) -> bool:
    return hmac.compare_digest(signature(key, body), recorded)
