"""Random changes to keyed state and their dict model, for the incremental level's model-based test
of changelog chains: values, lists, maps and timers in several namespaces, for keys whose bytes
are prefixes of each other's and map keys that look like length prefixes, in few key groups so
that changed cells meet both many and few neighbours."""
from __future__ import annotations

import random
from typing import Any

from statekit.serializers import BytesSerializer, Int64Serializer
from statekit.spi import (
    KeyedStateBackend, ListStateDescriptor, MapStateDescriptor, StateDescriptor, ValueStateDescriptor,
    key_group_for_key,
)

#: few key groups, so that each holds many keys
MAX_PARALLELISM = 4
KEYS = [b"", b"a", b"ab", b"abc", b"\x01", b"\x01\x80", b"\x80", b"\x80\x01", b"\xff", b"\xff\xff",
        *(b"k%d" % i for i in range(30))]
NAMESPACES = [None, 1, 2, 300, b"\x00"]
USER_KEYS = [b"", b"\x00", b"\x00\x01", b"\x01", b"\x81", b"\x81\x01", b"\x80\x80\x01", b"\xff", b"\xff\x00",
             *(b"u%d" % i for i in range(50))]
TIMERS = "_timers/chain-model"
KEY_SERIALIZER = BytesSerializer()

#: what the model holds: (state, key, namespace) -> value, list or dict; and (key, namespace, timestamp) timers
Model = tuple[dict[tuple[str, bytes, Any], Any], set[tuple[bytes, Any, int]]]


def descriptors(late: bool) -> dict[str, StateDescriptor]:
    """The states; ``late`` adds one registered after the first checkpoints."""
    states: dict[str, StateDescriptor] = {
        "value": ValueStateDescriptor("value", Int64Serializer()),
        "list": ListStateDescriptor("list", Int64Serializer()),
        "map": MapStateDescriptor("map", BytesSerializer(), Int64Serializer())}
    if late:
        states["late-map"] = MapStateDescriptor("late-map", BytesSerializer(), Int64Serializer())
    return states


def set_model_key(backend: KeyedStateBackend, key: bytes) -> None:
    backend.set_current_key(key, key_group_for_key(key, MAX_PARALLELISM))


def change(backend: KeyedStateBackend, rnd: random.Random, model: Model, late: bool, operations: int) -> None:
    """``operations`` random writes on a few keys or on all, applied to ``backend`` and ``model``."""
    cells, timers = model
    states = {name: backend.get_state(d) for name, d in descriptors(late).items()}
    queue = backend.create_timer_queue(TIMERS)
    keys = rnd.sample(KEYS, rnd.choice([1, 3, len(KEYS)]))
    for _ in range(operations):
        key, namespace, name, r = rnd.choice(keys), rnd.choice(NAMESPACES), rnd.choice([*states, TIMERS]), rnd.random()
        set_model_key(backend, key)
        if name == TIMERS:
            timestamp = rnd.randrange(20)
            if r < 0.6:
                queue.add(timestamp, namespace)
                timers.add((key, namespace, timestamp))
            else:
                queue.remove(timestamp, namespace)
                timers.discard((key, namespace, timestamp))
            continue
        state: Any = states[name]
        state.set_current_namespace(namespace)
        cell = (name, key, namespace)
        if r < 0.15:
            state.clear()
            cells.pop(cell, None)
        elif name == "value":
            cells[cell] = rnd.randrange(1000)
            state.update(cells[cell])
        elif name == "list" and r < 0.3:
            elements = [rnd.randrange(100) for _ in range(rnd.randrange(3))]
            state.update(elements)
            cells[cell] = elements
        elif name == "list":
            element = rnd.randrange(100)
            state.add(element)
            cells.setdefault(cell, []).append(element)
        elif r < 0.25:  # a map of many entries
            entries = {user_key: rnd.randrange(100) for user_key in rnd.sample(USER_KEYS, 40)}
            state.put_all(entries)
            cells.setdefault(cell, {}).update(entries)
        elif r < 0.5:
            user_key = rnd.choice(USER_KEYS)
            state.remove(user_key)
            cells.get(cell, {}).pop(user_key, None)
        else:
            user_key = rnd.choice(USER_KEYS)
            cells.setdefault(cell, {})[user_key] = rnd.randrange(100)
            state.put(user_key, cells[cell][user_key])
    for cell in [cell for cell, held in cells.items() if held in ([], {})]:
        del cells[cell]


def read(backend: KeyedStateBackend, late: bool) -> Model:
    """Every cell and timer ``backend`` holds (its timers are polled: read a restored backend only)."""
    cells: dict[tuple[str, bytes, Any], Any] = {}
    states: dict[str, Any] = {name: backend.get_state(d) for name, d in descriptors(late).items()}
    for key in KEYS:
        set_model_key(backend, key)
        for namespace in NAMESPACES:
            for name, state in states.items():
                state.set_current_namespace(namespace)
                held: Any = state.value() if name == "value" else \
                    list(state.get()) if name == "list" else dict(state.items())
                if held not in (None, [], {}):
                    cells[(name, key, namespace)] = held
    queue = backend.create_timer_queue(TIMERS)
    timers = set()
    while (timer := queue.poll(1 << 62)) is not None:
        timers.add((timer.key, timer.namespace, timer.timestamp))
    return cells, timers


def copied(model: Model) -> Model:
    cells, timers = model
    return {cell: held.copy() if isinstance(held, (list, dict)) else held for cell, held in cells.items()}, set(timers)
