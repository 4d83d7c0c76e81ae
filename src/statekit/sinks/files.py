"""``ParquetFileSink``: exactly-once Parquet files in any fsspec directory (local, S3, ...).

Each subtask writes its epoch's output to one staged file, ``<dir>/_staging/<transaction id>.parquet``
(pre-commit closes it: on an object store the upload completes). Commit moves it to its final
name, ``<dir>/<job>~<operator>~e<epoch>~s<subtask>.parquet`` (``~`` is in no job or operator id,
so jobs sharing the directory never name a file alike): a rename on file systems, which is
atomic; on object stores a server-side copy, which makes the whole object appear at once, then
the staged object is deleted. One file per transaction keeps every commit atomic. Readers of the
directory (``spark.read.parquet(dir)``, ``pyarrow.dataset``) skip ``_``-prefixed names, so they
see the files of committed epochs only.

On this machine's file system (``file://``) the staged file is synced to the disk at pre-commit,
with its directory entries, and the rename at commit: the output a completed checkpoint records
survives an OS crash, and so does a commit the next checkpoint no longer records.

Committing again is harmless: a staged file that is gone while its final file exists was
committed before. A staged file that is gone without a final file was deleted by someone else
(e.g. an object-store lifecycle rule on ``_staging/``): ``TransactionLostError``.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from statekit.spi.errors import ConfigurationError, TransactionLostError
from statekit.spi.sinks import TRANSACTION_ID_SEPARATOR, SinkContext, TwoPhaseCommitSink, transaction_prefix
from statekit.storage.durability import is_local, make_directories, sync_directory, sync_to_disk
from statekit.storage.urls import open_url

STAGING_DIR = "_staging"
_SETTING = "ParquetFileSink(path=...)"


@dataclass
class FileTransaction:
    context: SinkContext
    staged: str  # paths relative to the sink's directory
    final: str
    _file: Any = None
    _writer: pq.ParquetWriter | None = None
    rows: int = 0


class ParquetFileSink(TwoPhaseCommitSink[FileTransaction]):
    def __init__(self, path: str, storage_options: Mapping[str, Any] | None = None,
                 compression: str = "snappy") -> None:
        self.path = path.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.compression = compression
        fs, root = open_url(self.path, _SETTING, self.storage_options)  # a bad URL fails here, on the driver
        if is_local(fs):
            _check_local_directory(root)

    def describe(self) -> str:
        return f"Parquet files in {self.path}"

    def _fs(self) -> tuple[Any, str]:
        return open_url(self.path, _SETTING, self.storage_options)

    def _fresh_fs(self) -> tuple[Any, str]:
        """The file system with its listings cache dropped: the coordinator must see the files the
        executors staged since it last looked (s3fs answers ``exists`` from cached listings)."""
        fs, root = self._fs()
        fs.invalidate_cache()
        return fs, root

    # --- task side
    def begin_transaction(self, context: SinkContext) -> FileTransaction:
        final = TRANSACTION_ID_SEPARATOR.join(
            [context.job_id, context.operator_id, f"e{context.epoch:010d}", f"s{context.subtask:05d}"]) + ".parquet"
        return FileTransaction(context, posixpath.join(STAGING_DIR, f"{context.transaction_id}.parquet"), final)

    def write(self, transaction: FileTransaction, batch: pa.RecordBatch) -> None:
        if transaction._writer is None:
            fs, root = self._fs()
            make_directories(fs, posixpath.join(root, STAGING_DIR))
            transaction._file = fs.open(posixpath.join(root, transaction.staged), "wb")
            transaction._writer = pq.ParquetWriter(transaction._file, batch.schema, compression=self.compression)
        transaction._writer.write_batch(batch)
        transaction.rows += batch.num_rows

    def pre_commit(self, transaction: FileTransaction) -> dict[str, Any]:
        if transaction._writer is None:  # no rows: nothing to publish
            return {"id": transaction.context.transaction_id, "staged": None, "final": None, "rows": 0}
        transaction._writer.close()
        transaction._file.close()  # an object store's upload completes here
        fs, root = self._fs()
        if is_local(fs):  # the checkpoint that records it promises it survives
            sync_to_disk(posixpath.join(root, transaction.staged))
        return {"id": transaction.context.transaction_id, "staged": transaction.staged, "final": transaction.final,
                "rows": transaction.rows}

    def abort(self, transaction: FileTransaction) -> None:
        if transaction._writer is None:
            return
        try:
            transaction._writer.close()
            transaction._file.close()
        finally:
            fs, root = self._fs()
            staged = posixpath.join(root, transaction.staged)
            if fs.exists(staged):
                fs.rm(staged)

    # --- coordinator side
    def commit(self, record: dict[str, Any]) -> None:
        if record.get("staged") is None:
            return
        fs, root = self._fresh_fs()
        staged, final = posixpath.join(root, record["staged"]), posixpath.join(root, record["final"])
        if fs.exists(staged):
            fs.mv(staged, final)  # a rename; on object stores a copy (atomic per object) and a delete
            if is_local(fs):  # before the next checkpoint forgets the transaction
                sync_directory(posixpath.dirname(final))
                sync_directory(posixpath.dirname(staged))
        elif not fs.exists(final):
            raise TransactionLostError(f"transaction {record['id']}: its staged file {staged} is gone and {final} "
                                       f"does not exist")

    def lingering(self, job_id: str, operator_id: str) -> list[dict[str, Any]]:
        fs, root = self._fresh_fs()
        prefix = transaction_prefix(job_id, operator_id)
        try:
            names = [posixpath.basename(p) for p in fs.ls(posixpath.join(root, STAGING_DIR), detail=False)]
        except FileNotFoundError:
            return []
        return [{"id": name[:-len(".parquet")], "staged": posixpath.join(STAGING_DIR, name)}
                for name in sorted(names) if name.startswith(prefix) and name.endswith(".parquet")]

    def recover_and_abort(self, record: dict[str, Any]) -> None:
        fs, root = self._fs()
        staged = posixpath.join(root, record["staged"])
        try:
            fs.rm(staged)
        except FileNotFoundError:
            pass

    def is_transient(self, error: BaseException) -> bool:
        return isinstance(error, (ConnectionError, TimeoutError)) or (
            isinstance(error, OSError) and not isinstance(error, (FileNotFoundError, PermissionError)))

    def __repr__(self) -> str:
        return f"ParquetFileSink({self.path!r})"


def _check_local_directory(path: str) -> None:
    """Refuse a local sink directory that is a regular file or lies under one (the first write
    would fail making its staging directory)."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        where = "is" if existing == os.path.abspath(path) else f"lies under {existing}, which is"
        raise ConfigurationError(f"ParquetFileSink(path={path!r}) {where} a regular file, not a directory: the sink writes "
                                 f"its files into a directory; choose a path that is a directory or does not exist yet")

