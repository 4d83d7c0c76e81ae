"""The exception hierarchy every part of statekit raises.

Each error names the cause and the fix; callers can catch `StatekitError` for all of them.
"""
from __future__ import annotations


class StatekitError(Exception):
    """Base class of every error statekit raises on purpose."""


class ConfigurationError(StatekitError, ValueError):
    """A setting has a value statekit cannot use (names the setting and the accepted values)."""


class StateAccessError(StatekitError):
    """State was used in a way its contract forbids (no current key, None element, ...)."""


class SerializationError(StatekitError):
    """A value could not be serialized or deserialized by the state's serializer."""


class IncompatibleSerializerError(StatekitError):
    """The serializer registered now cannot read state written by the one in the snapshot."""


class SnapshotError(StatekitError):
    """Taking or writing a snapshot failed."""


class RestoreError(StatekitError):
    """State could not be restored from the given handles."""


class CorruptStateError(RestoreError):
    """A checkpoint file is truncated or its checksum does not match its handle."""


class UntrustedCheckpointError(RestoreError):
    """A checkpoint holds state that runs code when it is read (pickle), and the reader was not told
    to trust the checkpoint (``spark.statekit.restore.trust-pickle``) nor could verify its signature;
    nothing of it was deserialized."""


class WorkingStateError(StatekitError):
    """A disk-backed backend could not write its working state on executor-local disk (the disk is
    full or failing, or an LMDB map reached its size): names the directory, the setting that chooses
    it and the fix."""


class CapabilityError(StatekitError):
    """A feature was asked of a backend or storage that does not declare it."""


class JobOwnershipError(StatekitError):
    """Another run owns the job's checkpoints: a second writer with the same job id, or a
    different query or job reusing a job id (names both and the fix)."""


class FunctionResultError(StatekitError):
    """A user function returned something that is not None or an iterable of rows (names the
    function, the key and what it returned)."""


class SinkError(StatekitError):
    """A sink could not write, commit or publish an epoch's output (names the sink, the epoch and
    what happens to the output)."""


class TransactionLostError(SinkError):
    """A pre-committed transaction is gone from its target without having been committed (rolled
    back by hand, or by the server after a timeout): its rows cannot be committed."""
