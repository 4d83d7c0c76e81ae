"""What migrating a state costs when its record schema changed, per backend, same run: a restore of
``keys`` keys' record state followed by its registration with an evolved schema (every value
migrated: read, converted, written) against the same restore registered with the same schema.

The state is a value state of ``Reading`` records (four fields), one per key, in a full canonical
snapshot kept in memory; the evolved schema drops a field, widens one to a double, adds one with
a default and reorders them. Migration is eager (every value at registration): the record shows
what a restore that migrates costs over one that does not.

The lazy alternative (values converted when read, until written again) is measured by what it
would add to every read: decoding a value with the old schema and converting it, against
decoding it with the new one, over the same values. ``break_even_reads`` is how many reads of
not-yet-rewritten values cost what the eager migration costs once; a job reads most of its
state far more often than that, which is why statekit migrates eagerly.

    python -m benchmarks.migration [--keys 1000000] [--backends heap,rocksdb,lmdb] [--json FILE]
"""
from __future__ import annotations

import shutil
import tempfile
import time
from typing import Any

from benchmarks.fixtures import BACKENDS, keyed_backend, sized_command
from benchmarks.report import record
from statekit.conformance_tests.migration import ReadingV1, ReadingV2
from statekit.serializers.record import RecordSerializer
from statekit.spi import ValueStateDescriptor
from statekit.spi.key_groups import key_group_for_key
from statekit.storage.inline import InlineStreams

OLD = ValueStateDescriptor("reading", RecordSerializer(ReadingV1))
NEW = ValueStateDescriptor("reading", RecordSerializer(ReadingV2))


def run(keys: int = 1_000_000, backends: tuple[str, ...] = BACKENDS) -> list[dict]:
    lazy, decoded = _lazy_read_seconds(min(keys, 200_000))
    per_read = max(lazy - decoded, 1e-12)
    results = [record("a read under lazy migration (old decode + convert) vs a migrated value's read",
                      lazy * 1e6, decoded * 1e6, "µs/value", group="migration", backend="any",
                      lazy_overhead_us_per_read=per_read * 1e6)]
    for backend in backends:
        work = tempfile.mkdtemp(prefix=f"statekit-bench-migration-{backend}-")
        try:
            handle, streams = _snapshot(backend, work, keys)
            plain = _restore_and_register(backend, work, "plain", handle, streams, OLD, keys)
            migrated = _restore_and_register(backend, work, "migrated", handle, streams, NEW, keys)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        eager = max(migrated - plain, 1e-9) / keys
        results.append(record(f"{backend} restore of {keys:,} record keys: migrated to a new schema vs as is",
                              migrated, plain, "s", group="migration", backend=backend, keys=keys,
                              keys_per_second=1 / eager, eager_us_per_key=eager * 1e6,
                              break_even_reads=eager / per_read))
    return results


def _lazy_read_seconds(values: int) -> tuple[float, float]:
    """Seconds per value: reading an old-schema value as a lazy migration would (decode with the
    old schema, convert), and reading the migrated value (decode with the new one)."""
    old, new = OLD.serializer, NEW.serializer
    old_bytes = old.serialize_many([ReadingV1(f"sensor-{i}", i % 100, i, "celsius") for i in range(values)])
    new_bytes = new.serialize_many([new.migrate(v, old) for v in old.deserialize_many(old_bytes)])
    started = time.perf_counter()
    for data in old_bytes:
        new.migrate(old.deserialize(data), old)
    lazy = time.perf_counter() - started
    started = time.perf_counter()
    for data in new_bytes:
        new.deserialize(data)
    return lazy / values, (time.perf_counter() - started) / values


def _snapshot(backend: str, work: str, keys: int) -> tuple[Any, InlineStreams]:
    state_backend = keyed_backend(backend, f"{work}/written")
    try:
        state = state_backend.get_state(OLD)
        for i in range(keys):
            key = f"sensor-{i}"
            state_backend.set_current_key(key, key_group_for_key(key, state_backend.max_parallelism))
            state.update(ReadingV1(key, i % 100, i, "celsius"))
        streams = InlineStreams()
        return state_backend.snapshot(1).write(streams), streams
    finally:
        state_backend.dispose()


def _restore_and_register(backend: str, work: str, name: str, handle: Any, streams: InlineStreams,
                          descriptor: ValueStateDescriptor, keys: int) -> float:
    """Seconds to restore the snapshot and register the state (migrating it where the schema
    changed); the last key's value is checked."""
    started = time.perf_counter()
    restored = keyed_backend(backend, f"{work}/{name}", restore=[handle], streams=streams)
    try:
        state = restored.get_state(descriptor)
        seconds = time.perf_counter() - started
        last = f"sensor-{keys - 1}"
        restored.set_current_key(last, key_group_for_key(last, restored.max_parallelism))
        value = state.value()
        assert value is not None and value.sensor == last, f"{name}: {value}"
        return seconds
    finally:
        restored.dispose()


if __name__ == "__main__":
    sized_command(__doc__.splitlines()[0], run)
