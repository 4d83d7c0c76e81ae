"""Stored keys (``key_layout``) split into the canonical format's key, namespace and user-key
columns at once: the length prefixes are decoded and the parts gathered with numpy, with no
Python object per cell."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from statekit.backends.common.key_layout import KEY_GROUP_PREFIX_BYTES


def split_cell_keys(stored: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``(key, namespace, user_key)`` columns of a binary array of stored keys (user keys empty
    where there are none), as ``split_cell_key`` splits each."""
    data, offsets, key_start, key_length, ns_start, ns_length = _parts(stored)
    user_start = ns_start + ns_length
    return (_gather(data, key_start, key_length), _gather(data, ns_start, ns_length),
            _gather(data, user_start, offsets[1:] - user_start))


def cells_of(stored: pa.Array) -> pa.Array:
    """The cell of each stored key: its bytes up to the end of the namespace (no user key)."""
    data, offsets, _, _, ns_start, ns_length = _parts(stored)
    return _gather(data, offsets[:-1], ns_start + ns_length - offsets[:-1])


def _parts(stored: pa.Array) -> tuple[np.ndarray, ...]:
    """The data and offsets of a binary array of stored keys, and where each key's key and
    namespace parts start and how long they are."""
    n = len(stored)
    offsets = np.frombuffer(stored.buffers()[1], np.int32, n + 1, stored.offset * 4).astype(np.int64)
    data_buffer = stored.buffers()[2]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    key_length, key_start = _varints(data, offsets[:-1] + KEY_GROUP_PREFIX_BYTES)
    ns_length, ns_start = _varints(data, key_start + key_length)
    return data, offsets, key_start, key_length, ns_start, ns_length


def _varints(data: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unsigned LEB128 number at each position, and the position after it."""
    value = np.zeros(len(positions), np.int64)
    after = positions.copy()
    pending = np.arange(len(positions))
    shift = 0
    while len(pending):
        byte = data[after[pending]].astype(np.int64)
        value[pending] |= (byte & 0x7F) << shift
        after[pending] += 1
        pending = pending[byte >= 0x80]
        shift += 7
    return value, after


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of ``data[start:start + length]`` for each pair."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return pa.BinaryArray.from_buffers(pa.binary(), len(starts), [None, pa.py_buffer(offsets.astype(np.int32)),
                                                                 pa.py_buffer(data[index])])
