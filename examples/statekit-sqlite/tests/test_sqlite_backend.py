"""What the conformance suite leaves to each backend: its options, how it is found, its files."""
import os

import pytest

from statekit.backends.common import acquire_lock
from statekit.conformance_tests.base import open_keyed_backend, set_key
from statekit.registry import available_backends, backend_class
from statekit.spark.conf import StatekitConf
from statekit.spi import ConfigurationError, MapStateDescriptor, StatekitError
from statekit_sqlite import SQLiteOptions, SQLiteStateBackend
from statekit_sqlite.store import PAGE


def test_found_by_its_entry_point_name():
    assert "sqlite" in available_backends()
    assert backend_class("sqlite") is SQLiteStateBackend


def test_options_arrive_from_spark_conf():
    conf = StatekitConf.parse({"backend": "sqlite", "backend.sqlite.cache-size": "8m",
                               "backend.sqlite.synchronous": "NORMAL",
                               "backend.sqlite.changelog.max-chain-length": "4"})
    options = conf.create_backend().sqlite_options
    assert (options.cache_size, options.synchronous, options.changelog.max_chain_length) == (8 << 20, "normal", 4)


@pytest.mark.parametrize("options,message", [
    ({"cache_sise": "8m"}, r"unknown setting spark.statekit.backend.sqlite.cache_sise \(did you mean "
                           r"spark.statekit.backend.sqlite.cache-size\?\); known: "
                           r"spark.statekit.backend.sqlite.cache-size"),
    ({"cache-size": "lots"}, "spark.statekit.backend.sqlite.cache-size must be a size in bytes from 1 to 1t, written "
                             "like 4096, 64m or 1g"),
    ({"synchronous": "extra"}, "spark.statekit.backend.sqlite.synchronous must be one of off, normal, full"),
    ({"changelog.max-chain-length": "0"}, "changelog.max-chain-length must be a whole number from 1 to"),
])
def test_bad_options_fail_naming_the_setting(options, message):
    with pytest.raises(ConfigurationError, match=message):
        SQLiteOptions.parse(options)


def test_a_second_opener_of_the_working_state_is_refused(tmp_path):
    backend = open_keyed_backend(SQLiteStateBackend(), str(tmp_path))
    try:
        with pytest.raises(StatekitError, match="already open"):
            acquire_lock(backend.instance_dir, "the SQLite database")
    finally:
        backend.dispose()
    assert not os.path.exists(backend.instance_dir), "dispose removes the instance directory"


def test_writes_while_iterating_a_long_range_do_not_reach_it(tmp_path):
    backend = open_keyed_backend(SQLiteStateBackend(), str(tmp_path))
    try:
        set_key(backend, "k")
        entries = backend.get_state(MapStateDescriptor("m"))
        entries.put_all({i: i for i in range(3 * PAGE)})
        seen = []
        for key, value in entries.items():  # a page, then a view: the range is longer than PAGE
            entries.remove(key)
            entries.put(("new", key), value)
            seen.append(key)
        assert sorted(seen) == list(range(3 * PAGE)), "the iteration saw its own writes"
        assert dict(entries.items()) == {("new", i): i for i in range(3 * PAGE)}
    finally:
        backend.dispose()
