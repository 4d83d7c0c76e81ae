"""The LMDB keyed state backend (py-lmdb): state in a memory-mapped B+tree on local disk.

Layout. One LMDB environment per keyed backend, in its own instance directory under the local
dir (``local-dir`` option, ``KeyedBackendParams.local_dir``, or the temp dir):
``<local>/<job>/<operator>/<subtask>-<id>/{statekit.lock, env/, spill-*/}``. One named database
per state (at most ``max-dbs``); keys laid out by ``key_layout`` (key-group prefix, prefix-free).

Long keys: rejected. LMDB keys are at most 511 bytes (``env.max_key_size()``); a stored key is
2 + key + namespace (+ map user key) bytes with length prefixes. Writing a longer key raises
``StateAccessError`` naming the state, the size and the limit, and nothing is written; reading one
finds nothing (no such key can exist), at no cost on the hot path. Hashing long keys
and spilling the originals would need collision chains and would break the order that key-group
and map range scans rely on; a key serializer that hashes is the user's explicit choice instead.
Values have no limit.

Transactions. LMDB commits are expensive next to a Python state access, so there is one
long-lived write transaction: begun by the first access, used by every read and write through
one cursor per table (reads see the transaction's own writes), and committed at snapshot time,
before a read snapshot is begun, before a named database is created, and when its writes reach
``write-batch-size``. Puts are write-behind: a table keeps them in a dict (a key written again
keeps its last value; reads look there first) and writes them into the transaction in one
``putmulti`` call before a range of it is read or deleted and before a commit (a per-key put
measured about 480 ns as a native ``put`` with its replay-log entry, about 150 ns as a dict
store). A write transaction belongs to the thread that began it, so the backend is used from one
thread (as the SPI says); only a pending snapshot's ``write()`` runs elsewhere.

Iteration. ``items(lower, upper)`` reads up to 1024 entries into a list at once (a map of one
key, typically), so the caller may write while iterating. A larger range (``keys()`` of a state,
a huge map) commits and continues from a read transaction, an MVCC snapshot that later writes
cannot reach; it is released when the iteration ends or the iterator is dropped.

Map growth. The map starts at ``map-size`` (64 MiB) and doubles, ahead of time when a commit
finds it half full and no snapshot is open, and on ``MapFullError`` otherwise. py-lmdb (like
LMDB) leaves the write transaction unusable after ``MapFullError`` and its writes are lost, so
every write since the last commit is kept in a replay log (bounded by ``write-batch-size``); the
transaction is aborted, the map doubled and the log replayed: no write is lost (puts still
pending were never in the transaction: they stay pending).
``set_mapsize`` ends every transaction of the environment, so a pending snapshot's read
transaction is first spilled to a private compacted copy of its point in time (rare: only when
the map grows while a snapshot is pending).

Durability. The checkpoint is the durability point; the local environment is a working copy that
is rebuilt from the checkpoint after a failure. Defaults: ``sync=false`` and ``metasync=false``
(no fsync per commit: a process crash loses nothing committed, an OS crash may lose or corrupt the
local copy, which is then not reused), ``writemap=false`` (pages are written with ``pwrite``:
application memory bugs cannot scribble on the map, the data file does not take the map's size,
and nested transactions stay possible; ``writemap=true`` measured 5-9% faster for raw py-lmdb
but at most 3% through the backend in ``benchmarks/lmdb_backend.py``),
``readahead=false`` (state access is random: readahead only evicts useful pages), ``lock=true``
(LMDB's reader table: read snapshots and the writer run concurrently, from any thread).

Snapshots. The synchronous part commits and begins a read transaction; the asynchronous part
(possibly on another thread: py-lmdb opens every environment with ``MDB_NOTLS``, so a read
transaction is not bound to the thread that began it) writes the canonical format from its
cursors and aborts it. Processing continues meanwhile in new write transactions, invisible to
it. Incremental snapshots are the shared layer's changelog (``common.changelog``): a canonical base
and deltas of the cells changed since the last completed checkpoint.

Full checkpoints in LMDB's own format (``SnapshotFormat.NATIVE``, ``native_snapshot.py``): the
same read transaction, copied compacted by LMDB into one file that is uploaded as it is.

Restore. From canonical handles (``KeyGroupsStateHandle``: any backend's savepoints and full
checkpoints; also the shared layer's changelog chains of them, as the heap backend writes) through
``restore_canonical``, which writes with ``put_many``; on rescale only the new range's key groups
are read. From native handles: the stored file becomes the environment (same key groups), or each
one's range is copied in (rescale). Other handle types (RocksDB's native ones) are rejected with
the fix. Whatever the restore, the backend knows every state it holds before the job registers any:
the states from the handles' metadata, and their databases, which the store opens when it opens
an environment that already holds some (one put in place, or resumed by local recovery). A read
snapshot sees only the databases opened in this process, so without that a savepoint conversion
(which registers no state) wrote nothing, and a checkpoint dropped every state not touched since.

Lifecycle. The environment is opened by the keyed backend, i.e. in the worker that uses it, never
before a fork (a forked child that inherits one gets a clear error on use). LMDB allows several
processes in one environment; statekit does not, so the instance directory is held with an
exclusive ``flock`` on ``statekit.lock`` and a second opener gets a ``StatekitError``.
``dispose()`` aborts the write transaction, ends pending snapshots, closes the environment,
releases the lock and removes the instance directory.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from statekit.backends.common.abstract_keyed import streams_to_read
from statekit.backends.common.canonical import DEFAULT_COMPRESSION
from statekit.backends.common.changelog import ChangelogConfig, ChangelogStateHandle
from statekit.backends.common.kv_backend import KVKeyedStateBackend
from statekit.backends.common.local_dirs import instance_path
from statekit.backends.common.operator_state import DefaultOperatorStateBackend
from statekit.backends.lmdb.options import OPTIONS, LMDBOptions
from statekit.backends.lmdb.native_snapshot import NativeLMDBSnapshot, NativeLMDBStateHandle, copy_range, download
from statekit.backends.lmdb.read_snapshot import LMDBView
from statekit.backends.lmdb.store import ENV_DIR, LMDBStore
from statekit.backends.lmdb.table import LMDBTable
from statekit.spi.backend import (
    Capabilities, KeyedBackendParams, OperatorBackendParams, OperatorStateBackend, PendingSnapshot, SnapshotFormat,
    SnapshotOptions, SnapshotType, StateBackend, StateSize,
)
from statekit.spi.errors import RestoreError, StatekitError
from statekit.spi.handles import KeyGroupsStateHandle


class LMDBStateBackend(StateBackend):
    """Keyed state in LMDB on executor-local disk; full (canonical) snapshots from MVCC reads,
    incremental ones as changelog deltas (``common.changelog``)."""

    name = "lmdb"
    local_dir_option = "local-dir"
    capabilities = Capabilities(incremental_snapshots=True, async_snapshots=True, ttl=True, event_time_ttl=True,
                                out_of_core=True, local_recovery=True, native_snapshots=True)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        values = OPTIONS.parse(options)
        self.lmdb_options = values.build(LMDBOptions)
        self.changelog = values.build(ChangelogConfig, "changelog.")
        self.local_dir: str | None = values["local-dir"]
        self.snapshot_compression: str = values["snapshot-compression"]

    def create_keyed_backend(self, params: KeyedBackendParams) -> "LMDBKeyedStateBackend":
        return LMDBKeyedStateBackend(params, self.lmdb_options, self.local_dir, self.changelog,
                                     supports_ttl=self.capabilities.ttl, snapshot_compression=self.snapshot_compression,
                                     supports_event_time_ttl=self.capabilities.event_time_ttl)

    def create_operator_backend(self, params: OperatorBackendParams) -> OperatorStateBackend:
        return DefaultOperatorStateBackend(params)


class LMDBKeyedStateBackend(KVKeyedStateBackend):
    backend_name = "lmdb"

    def __init__(self, params: KeyedBackendParams, options: LMDBOptions | None = None,
                 local_dir: str | None = None, changelog: ChangelogConfig = ChangelogConfig(),
                 supports_ttl: bool = True, snapshot_compression: str = DEFAULT_COMPRESSION,
                 supports_event_time_ttl: bool = True) -> None:
        super().__init__(params, changelog, supports_ttl, snapshot_compression, supports_event_time_ttl)
        unknown = [h for h in params.restore_handles
                   if not isinstance(h, (KeyGroupsStateHandle, ChangelogStateHandle, NativeLMDBStateHandle))]
        if unknown:
            raise RestoreError(f"the lmdb backend cannot restore a {type(unknown[0]).__name__}: it restores "
                               f"canonical snapshots (KeyGroupsStateHandle, and changelog chains of them) and its "
                               f"own native ones only; take a savepoint with the backend that wrote it and restore "
                               f"from the savepoint")
        self._options = options or LMDBOptions()
        self.backend_id = uuid.uuid4().hex
        #: a working directory given for local recovery outlives this instance
        self._keeps_dir = params.working_dir is not None
        self.instance_dir = params.working_dir or instance_path(params.local_dir or local_dir, "lmdb",
                                                                params.subtask, self.backend_id)
        self._tables: dict[str, LMDBTable] = {}
        self._store: LMDBStore | None = None
        if params.resume_local_state and params.restore_handles and not LMDBStore.exists(self.instance_dir):
            raise RestoreError(f"local recovery: {self.instance_dir} holds no LMDB environment, but the state to "
                               f"resume is not empty; restore it from checkpoint storage instead")
        try:
            native = [h for h in params.restore_handles if isinstance(h, NativeLMDBStateHandle)]
            in_place = (not params.resume_local_state and len(params.restore_handles) == 1 and len(native) == 1
                        and native[0].key_group_range == self.key_group_range)
            if in_place:  # the stored environment becomes this one
                download(native[0], streams_to_read(params.restore_streams), os.path.join(self.instance_dir, ENV_DIR))
            self._store = LMDBStore(self.instance_dir, self._options)
            if params.resume_local_state:  # local recovery: the environment already holds the state
                self.resume_bookkeeping(params.restore_handles)
            elif params.restore_handles:
                self._restore(params, native, in_place)
                self._store.commit()
        except BaseException:
            self.dispose()
            raise

    def _restore(self, params: KeyedBackendParams, native: list[NativeLMDBStateHandle], in_place: bool) -> None:
        for handle in native:
            self.adopt_state_metas(handle.states, handle.key_serializer)
            if not in_place:
                copy_range(handle, streams_to_read(params.restore_streams), self.key_group_range, self.instance_dir,
                           lambda table, entries: self._table(table).put_many(entries), self._options.max_dbs)
        canonical = [h for h in params.restore_handles if not isinstance(h, NativeLMDBStateHandle)]
        if canonical:
            self.restore_canonical(canonical, params.restore_streams)

    def snapshot(self, checkpoint_id: int, options: SnapshotOptions = SnapshotOptions()) -> PendingSnapshot:
        if (options.snapshot_type is SnapshotType.CHECKPOINT and not options.incremental
                and options.format is SnapshotFormat.NATIVE):
            self._changelog.full(checkpoint_id)
            return NativeLMDBSnapshot(self.store.open_snapshot(), self.instance_dir, self.key_group_range,
                                      self.state_metas(), self.key_bytes.snapshot().to_json())
        return super().snapshot(checkpoint_id, options)

    @property
    def store(self) -> LMDBStore:
        if self._store is None:
            raise StatekitError("the lmdb backend was disposed")
        return self._store

    # --- the store
    def _table(self, name: str) -> LMDBTable:
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = self.store.table(name)
        return table

    #: the pages of each named database's B+tree (branch, leaf and overflow) times the page size:
    #: what the state occupies in the environment's file, free space in its pages included
    bytes_basis = "pages"

    def _table_sizes(self) -> dict[str, StateSize]:
        page_size = self.store.page_size()
        return {name: StateSize(stat["entries"], (stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"])
                                * page_size, True, self.bytes_basis)
                for name, stat in self.store.table_stats().items()}

    def _view(self) -> LMDBView:
        return LMDBView(self.store.open_snapshot())

    # --- lifecycle
    def dispose(self) -> None:
        self._tables.clear()
        store, self._store = self._store, None
        try:
            if store is not None:
                if self._keeps_dir and os.getpid() == store._pid:
                    store.sync()  # what the next epoch reopens is on disk before anyone says so
                store.close()
        finally:
            # a forked child leaves the parent's files; a working directory stays for local recovery
            if not self._keeps_dir and (store is None or os.getpid() == store._pid):
                shutil.rmtree(self.instance_dir, ignore_errors=True)
