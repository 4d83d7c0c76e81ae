"""State semantics: MapState."""
from __future__ import annotations

from typing import Any

from statekit.conformance_tests.base import BackendTestBase, set_key
from statekit.conformance_tests.semantics.common import NAMESPACES, mixed_keys, prefix_keys, assert_keys, map_state
from statekit.serializers import PickleSerializer
from statekit.spi import KeyedStateBackend, MapStateDescriptor

# --------------------------------------------------------------------------------------------
# MapState


class MapStateSemantics(BackendTestBase):
    """``MapState``: CRUD, views, snapshot iteration under mutation, prefix-free layout."""

    def test_map_get_missing_is_none(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        assert state.get("missing") is None, f"get of a missing user key read {state.get('missing')!r}"
        state.put("present", 1)
        assert state.get("missing") is None, \
            f"get of a missing user key read {state.get('missing')!r} when other keys exist"

    def test_map_put_get_contains_remove(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        assert not state.contains("a"), "contains('a') is true on an empty map"
        state.put("a", 1)
        assert state.get("a") == 1 and state.contains("a"), \
            f"after put('a', 1): get={state.get('a')!r} contains={state.contains('a')!r}"
        state.put("a", 2)
        assert state.get("a") == 2, f"put of an existing key did not overwrite: get('a') = {state.get('a')!r}"
        state.put("zero", 0)
        assert state.contains("zero") and state.get("zero") == 0, "a falsy value 0 was not stored"
        state.remove("a")
        assert state.get("a") is None and not state.contains("a"), \
            f"after remove('a'): get={state.get('a')!r} contains={state.contains('a')!r}"
        state.remove("a")  # removing a missing key is a no-op
        state.remove("never")
        assert dict(state.items()) == {"zero": 0}, f"map is {dict(state.items())!r}, expected {{'zero': 0}}"

    def test_map_put_all(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put("a", 0)
        state.put_all({"a": 1, "b": 2, "c": 3})
        state.put_all({})
        assert dict(state.items()) == {"a": 1, "b": 2, "c": 3}, f"after put_all map is {dict(state.items())!r}"

    def test_map_put_all_empty_creates_no_state(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({})
        assert state.is_empty(), "put_all({}) made the map non-empty"
        assert_keys(keyed_backend, "m", [])

    def test_map_views(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        assert state.is_empty(), "a fresh map is not empty"
        assert list(state.items()) == [] and list(state.keys()) == [] and list(state.values()) == [] \
            and list(state) == [], "a fresh map iterates entries"
        entries = {"x": 1, "y": [2], "z": {"n": 3}}
        state.put_all(entries)
        assert not state.is_empty(), "is_empty() is true after put_all"
        items = list(state.items())
        assert all(isinstance(it, tuple) and len(it) == 2 for it in items), f"items() yielded {items!r}"
        assert dict(items) == entries and len(items) == 3, f"items() is {items!r}"
        assert sorted(state.keys()) == ["x", "y", "z"], f"keys() is {list(state.keys())!r}"
        assert sorted(map(repr, state.values())) == sorted(map(repr, entries.values())), \
            f"values() is {list(state.values())!r}"
        assert sorted(state) == ["x", "y", "z"], f"iter() is {list(state)!r}"
        keys, values = list(state.keys()), list(state.values())
        assert dict(zip(keys, values)) == entries, \
            f"keys() and values() are not in the same order: {keys!r} / {values!r}"

    def test_map_clear(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({"a": 1, "b": 2})
        state.clear()
        assert state.is_empty() and list(state.items()) == [], f"after clear() map is {dict(state.items())!r}"
        assert state.get("a") is None and not state.contains("a"), "after clear() get('a') still finds a value"
        assert_keys(keyed_backend, "m", [])
        state.put("c", 3)
        assert dict(state.items()) == {"c": 3}, f"put after clear() gives {dict(state.items())!r}"

    def test_map_removing_last_entry_removes_key(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put("only", 1)
        state.remove("only")
        assert state.is_empty(), "map not empty after removing its only entry"
        assert_keys(keyed_backend, "m", [])

    def test_map_user_keys_of_several_types(self, keyed_backend: KeyedStateBackend) -> None:
        """User keys that are equal-looking but distinct ("1", 1, (1,), b"1") stay distinct (under pickle,
        which writes them all)."""
        entries = {"1": "str", 1: "int", (1,): "tuple", b"1": "bytes", 1.5: "float", "": "empty",
                   ("a", (2, "b")): "nested", -(2 ** 70): "bigint", 256: "int256", "a": "a", "ab": "ab"}
        state = map_state(keyed_backend, MapStateDescriptor("m", PickleSerializer()))
        set_key(keyed_backend, "k")
        for user_key, value in entries.items():
            state.put(user_key, value)
        for user_key, value in entries.items():
            assert state.get(user_key) == value, \
                f"get({user_key!r}) is {state.get(user_key)!r}, expected {value!r}"
        got = list(state.items())
        assert len(got) == len(entries) and dict(got) == entries, \
            f"items() is {got!r}, expected {entries!r}"
        assert {type(k) for k, _ in got} == {type(k) for k in entries}, \
            f"user-key types changed in iteration: {sorted({type(k).__name__ for k, _ in got})}"
        state.remove("a")
        assert state.get("ab") == "ab", "remove('a') removed user key 'ab'"
        state.remove(1)
        assert state.get(256) == "int256" and state.get("1") == "str" and state.get(b"1") == "bytes", \
            "remove(1) removed another user key"

    def test_map_iteration_snapshot_while_mutating(self, keyed_backend: KeyedStateBackend) -> None:
        """While iterating items(), put/remove/overwrite do not raise and the iteration yields the
        map as it was when it started."""
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        original = {f"k{i}": i for i in range(100)}
        state.put_all(original)
        iterator = iter(state.items())
        seen = [next(iterator)]
        for i in range(100):
            state.put(f"new{i}", -i)
        for i in range(0, 100, 2):
            state.remove(f"k{i}")
        for i in range(1, 100, 4):
            state.put(f"k{i}", "overwritten")
        seen.extend(iterator)
        assert len(seen) == len(original) and dict(seen) == original, \
            f"iteration under mutation yielded {len(seen)} entries; missing " \
            f"{sorted(set(original) - dict(seen).keys())[:5]}, unexpected " \
            f"{sorted(dict(seen).keys() - set(original))[:5]}, changed values " \
            f"{[(k, v) for k, v in seen if original.get(k) != v][:5]}"
        want = {k: ("overwritten" if (int(k[1:]) % 4 == 1) else v)
                for k, v in original.items() if int(k[1:]) % 2}
        want.update({f"new{i}": -i for i in range(100)})
        assert dict(state.items()) == want, "after the iteration the map does not reflect the mutations"

    def test_map_remove_all_while_iterating(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({i: str(i) for i in range(50)})
        removed = []
        for user_key in state:
            state.remove(user_key)
            removed.append(user_key)
        assert sorted(removed) == list(range(50)), f"iteration while removing visited {sorted(removed)!r}"
        assert state.is_empty(), f"map not empty after removing every key: {dict(state.items())!r}"
        assert_keys(keyed_backend, "m", [])

    def test_map_put_while_iterating_terminates(self, keyed_backend: KeyedStateBackend) -> None:
        """Adding an entry per visited entry must neither raise nor extend the iteration."""
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "k")
        state.put_all({f"k{i}": i for i in range(20)})
        visited = 0
        for user_key, value in state.items():
            visited += 1
            if visited > 40:
                raise AssertionError("iteration saw entries put during the iteration (did not stop after 40)")
            state.put(user_key + "x", value)
        assert visited == 20, f"iteration visited {visited} entries, expected the 20 present at its start"
        assert len(list(state.items())) == 40, f"map has {len(list(state.items()))} entries, expected 40"

    def test_map_iteration_sees_only_current_key_and_namespace(self, keyed_backend: KeyedStateBackend) -> None:
        """Prefix-free layout: entries of keys/namespaces that may share byte prefixes never bleed."""
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        keys = prefix_keys()
        namespaces = NAMESPACES

        def entries(ki: int, ni: int) -> dict[Any, Any]:
            return {"a": (ki, ni), "ab": (ki, ni, "ab"), ki: ni, (ki, ni): "t"}

        for ki, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ni, ns in enumerate(namespaces):
                state.set_current_namespace(ns)
                state.put_all(entries(ki, ni))
        for ki, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ni, ns in enumerate(namespaces):
                state.set_current_namespace(ns)
                got = list(state.items())
                assert len(got) == 4 and dict(got) == entries(ki, ni), \
                    f"key {key!r} namespace {ns!r} iterates {got!r}, expected {entries(ki, ni)!r}"
        set_key(keyed_backend, "a")
        state.set_current_namespace("w")
        state.clear()
        for ki, key in enumerate(keys):
            set_key(keyed_backend, key)
            for ni, ns in enumerate(namespaces):
                state.set_current_namespace(ns)
                want = {} if (key == "a" and ns == "w") else entries(ki, ni)
                got = dict(state.items())
                assert got == want, \
                    f"after clearing key 'a' namespace 'w', key {key!r} namespace {ns!r} iterates {got!r}"
        assert_keys(keyed_backend, "m", [k for k in keys if k != "a"], "w")
        assert_keys(keyed_backend, "m", keys, "w1")

    def test_map_ten_thousand_entries(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        set_key(keyed_backend, "big")
        entries = {i: f"v{i}" for i in range(10_000)}
        state.put_all(entries)
        set_key(keyed_backend, "small")
        state.put("only", 1)
        set_key(keyed_backend, "big")
        got = list(state.items())
        assert len(got) == 10_000, f"a 10000-entry map iterated {len(got)} entries"
        assert dict(got) == entries, "a 10000-entry map iterated wrong entries"
        set_key(keyed_backend, "small")
        assert dict(state.items()) == {"only": 1}, f"key 'small' iterates {dict(state.items())!r}"

    def test_map_key_isolation(self, keyed_backend: KeyedStateBackend) -> None:
        state = map_state(keyed_backend, MapStateDescriptor("m"))
        keys = mixed_keys(300)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            state.put("shared-user-key", i)
            state.put(i, key)
        for i, key in enumerate(keys):
            set_key(keyed_backend, key)
            got = dict(state.items())
            assert got == {"shared-user-key": i, i: key}, f"key {key!r} iterates {got!r}"
        assert_keys(keyed_backend, "m", keys)
