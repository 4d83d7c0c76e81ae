"""State semantics of timestamp keys: an aware ``datetime`` is an instant, one key in every time zone.

Spark gives a TIMESTAMP key in the session time zone, which may change between runs of a job;
Spark groups and hashes the instant, and so does the key group. A naive ``datetime`` (Spark's
TIMESTAMP_NTZ) is a wall-clock time: a key of its own, never equal to an aware one.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import assert_keys, list_state, map_state, value_state
from statekit.spi import KeyBatch, KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

INSTANT = dt.datetime(2024, 3, 10, 7, 30, 15, 250, tzinfo=dt.timezone.utc)
#: UTC and two other zones (fixed offsets: the suite needs no time zone database)
ZONES = (dt.timezone.utc, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(dt.timedelta(hours=-5), "EST"))


def in_every_zone(instant: dt.datetime) -> list[dt.datetime]:
    """``instant`` as seen in each of ``ZONES``: equal datetimes whose time zones differ."""
    return [instant.astimezone(zone) for zone in ZONES]


class InstantKeySemantics(BackendTestBase):
    """An aware datetime key (alone or in a tuple key) is its instant, in every state kind and in ``keys()``."""

    def test_one_instant_is_one_key_in_every_time_zone(self, keyed_backend: KeyedStateBackend) -> None:
        value = value_state(keyed_backend, ValueStateDescriptor("v"))
        listed = list_state(keyed_backend, ListStateDescriptor("l"))
        mapped = map_state(keyed_backend, MapStateDescriptor("m"))
        for i, key in enumerate(in_every_zone(INSTANT)):
            set_key(keyed_backend, key)
            value.update((value.value() or 0) + 1)
            listed.add(i)
            mapped.put(str(key.tzinfo), i)
        for key in in_every_zone(INSTANT):
            set_key(keyed_backend, key)
            got = (value.value(), list(listed.get()), len(dict(mapped.items())))
            assert got == (3, [0, 1, 2], 3), \
                f"one instant seen in {len(ZONES)} time zones must be one key: key {key!r} reads (value, list, " \
                f"map size) {got}, expected (3, [0, 1, 2], 3)"
        assert_keys(keyed_backend, "v", [INSTANT])

    def test_an_instant_in_a_tuple_key_is_one_key(self, keyed_backend: KeyedStateBackend) -> None:
        value = value_state(keyed_backend, ValueStateDescriptor("v"))
        for key in in_every_zone(INSTANT):
            set_key(keyed_backend, ("sensor-1", key))
            value.update((value.value() or 0) + 1)
        set_key(keyed_backend, ("sensor-1", INSTANT))
        assert value.value() == 3, \
            f"a tuple key whose instant is seen in {len(ZONES)} time zones must be one key: it reads {value.value()!r}"
        assert_keys(keyed_backend, "v", [("sensor-1", INSTANT)])

    def test_a_naive_datetime_is_a_key_of_its_own(self, keyed_backend: KeyedStateBackend) -> None:
        value = value_state(keyed_backend, ValueStateDescriptor("v"))
        naive = INSTANT.replace(tzinfo=None)  # the same wall-clock time as the instant in UTC
        set_key(keyed_backend, naive)
        value.update("naive")
        set_key(keyed_backend, INSTANT)
        value.update("aware")
        set_key(keyed_backend, naive)
        assert value.value() == "naive", f"a naive datetime key reads {value.value()!r}: it is not the UTC instant"
        set_key(keyed_backend, INSTANT.astimezone(ZONES[1]))
        assert value.value() == "aware", f"the instant reads {value.value()!r} in another zone"

    def test_bulk_writes_of_one_instant_are_one_key(self, keyed_backend: KeyedStateBackend) -> None:
        descriptor = ValueStateDescriptor("v")
        keys: list[Any] = in_every_zone(INSTANT)
        bulk = keyed_backend.get_bulk_state(descriptor)
        bulk.update_many(KeyBatch.of(keys, keyed_backend.max_parallelism), list(range(len(keys))))
        got = bulk.get_many(KeyBatch.of([INSTANT], keyed_backend.max_parallelism))
        assert got == [len(keys) - 1], \
            f"writes of one instant in {len(keys)} time zones are writes of one key, the last one held: got {got}"
        set_key(keyed_backend, keys[1])
        held = value_state(keyed_backend, descriptor).value()
        assert held == len(keys) - 1, f"the per-key state of the instant reads {held!r}"
