"""The heap backend's storage for one state: per key group, ``namespace -> key -> value``.

Copy-on-write per key group: a snapshot's synchronous part takes the list of key-group maps
(O(key groups), no entry is copied) and marks every key group shared. The first write to a
shared key group copies that key group's maps (and, for list and map state, the mutable
containers in it) so the snapshot keeps seeing the old ones. When the snapshot has been written,
and no other pending snapshot shares them, the key groups it still shares become exclusive again,
so a snapshot that is written before processing resumes costs no copies at all.

Held values are never shared with user code (``copies``): they are copied on the way in and
out, so the only writes to a key group are the state methods', and those go through
``writable``.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from statekit.backends.common.registration import RegisteredState
from statekit.backends.heap.copies import Namespaces, UserKeys
from statekit.spi.backend import PendingSnapshot, released_snapshot
from statekit.spi.descriptors import StateKind
from statekit.spi.errors import StateAccessError
from statekit.spi.key_groups import KeyGroupRange

#: held namespace (``copies.Namespaces``) -> key -> value (timers: the set of timestamps)
KeyGroupMap = dict[Any, dict[Any, Any]]

_MUTABLE_CONTAINER = {StateKind.LIST: list, StateKind.MAP: dict, StateKind.TIMERS: set}


class _Unusable(dict):  # type: ignore[type-arg]
    """A key-group slot whose every access fails with ``message``."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self._message = message

    def get(self, *args: Any) -> Any:
        raise StateAccessError(self._message)

    __getitem__ = __setitem__ = get


#: sits in the slot after the last key group, where the backend points before any ``set_current_key``:
#: state access there fails instead of touching a real key group
NO_CURRENT_KEY = _Unusable("keyed state was accessed with no current key; call set_current_key first "
                           "(state is only available inside process(), not in open())")
_DISPOSED_MESSAGE = "keyed state was used after its heap backend was disposed"
#: every slot of a disposed table: its state objects fail instead of reading or writing lost state
DISPOSED = _Unusable(_DISPOSED_MESSAGE)


class StateTable:
    def __init__(self, registration: RegisteredState, key_groups: KeyGroupRange) -> None:
        self.registration = registration
        #: map state: how user keys are held (by serialized bytes unless plain)
        self.user_keys = UserKeys(registration.user_key_serializer) if registration.kind is StateKind.MAP else None
        #: how namespaces are held (by serialized bytes unless plain)
        self.namespaces = Namespaces(registration.namespace_serializer)
        self.size = len(key_groups)
        # one slot per key group, plus NO_CURRENT_KEY at index ``size``
        self.groups: list[KeyGroupMap] = [{} for _ in range(self.size)] + [NO_CURRENT_KEY]
        self.owned: list[bool] = [True] * (self.size + 1)
        #: the pending snapshots that share key-group maps, by the id of their ``owned`` list (a set:
        #: its add and discard are atomic, and snapshots are released on their writer's thread)
        self._sharing: set[int] = set()
        self._container = _MUTABLE_CONTAINER.get(registration.kind)

    def writable(self, index: int) -> KeyGroupMap:
        """The key group's map, copied first if a pending snapshot shares it."""
        if self.owned[index]:
            return self.groups[index]
        container = self._container
        shared = self.groups[index]
        if container is None:
            copy = {ns: dict(entries) for ns, entries in shared.items()}
        else:
            copy = {ns: {k: container(v) for k, v in entries.items()} for ns, entries in shared.items()}
        self.groups[index] = copy
        self.owned[index] = True
        return copy

    def map_values(self, convert: Callable[[Any], Any], dropped: object = None) -> None:
        """Every value (list element, map value) replaced by ``convert`` of it, or removed where
        that is ``dropped`` (when given); key groups that a pending snapshot shares copied first."""
        kind = self.registration.kind
        for index in range(self.size):
            if not self.groups[index]:
                continue
            group = self.writable(index)
            for namespace, entries in list(group.items()):
                for key, held in list(entries.items()):
                    if kind is StateKind.LIST:
                        kept = [v for v in map(convert, held) if dropped is None or v is not dropped]
                    elif kind is StateKind.MAP:
                        kept = {user_key: v for user_key, v in ((u, convert(v)) for u, v in held.items())
                                if dropped is None or v is not dropped}
                    else:
                        kept = convert(held)
                    if dropped is not None and (kept is dropped or kind in (StateKind.LIST, StateKind.MAP)
                                                and not kept):
                        del entries[key]
                    else:
                        entries[key] = kept
                if not entries:
                    del group[namespace]

    def share(self) -> tuple[list[KeyGroupMap], list[bool]]:
        """Synchronous snapshot part: the current key-group maps, now shared with the caller."""
        self._check_usable()
        view = self.groups[:self.size]
        self.owned = [False] * self.size + [True]
        self._sharing.add(id(self.owned))
        return view, self.owned

    def unshare(self, owned_marker: list[bool], view: list[KeyGroupMap]) -> None:
        """The snapshot that took ``view`` is done: key groups still identical become exclusive.
        Only if no other snapshot shares them: none newer (the ``owned`` list is still the one it
        created) and none older still pending (an older snapshot's view holds the same maps)."""
        self._sharing.discard(id(owned_marker))
        if self.owned is owned_marker and not self._sharing:
            groups = self.groups
            for i, g in enumerate(view):
                if groups[i] is g:
                    owned_marker[i] = True

    def dispose(self) -> None:
        """Drop the state: every access from now on fails (a pending snapshot keeps its view)."""
        self.groups[:] = [DISPOSED] * len(self.groups)  # in place: the state objects hold this list
        self.owned = [True] * len(self.owned)

    def keys(self, namespace: Any) -> Iterator[Any]:
        """The keys with state in ``namespace`` as of this call (listed at once, so that state may be
        changed while iterating, as the byte stores' snapshot iterators allow)."""
        try:
            held = self.namespaces.held(namespace)
        except StateAccessError:  # a namespace of no bytes, which no state can be in
            return iter(())
        return iter([key for group in self.groups[:self.size] for key in group.get(held, ())])

    def keys_by_group(self, namespace: Any) -> list[tuple[Any, int]]:
        """(key, index of its key group in the range) of the keys with state in ``namespace``, as of this call."""
        try:
            held = self.namespaces.held(namespace)
        except StateAccessError:
            return []
        return [(key, index) for index, group in enumerate(self.groups[:self.size]) for key in group.get(held, ())]

    def is_empty(self) -> bool:
        self._check_usable()
        return not any(self.groups[:self.size])

    def _check_usable(self) -> None:
        if self.groups[self.size] is DISPOSED:
            raise StateAccessError(_DISPOSED_MESSAGE)


#: a state's table with the key-group maps it shared (``StateTable.share``) and its ``owned`` marker
SharedTables = dict[str, tuple[StateTable, list[KeyGroupMap], list[bool]]]


class SharedTablesSnapshot(PendingSnapshot):
    """A pending heap snapshot of the key-group maps its synchronous part shared; writing or
    releasing it gives them back (``StateTable.unshare``), once."""

    def __init__(self, shared: SharedTables) -> None:
        self._shared = shared
        self._released = False

    def _check_unreleased(self) -> None:
        if self._released:
            raise released_snapshot()

    def release(self) -> None:
        if not self._released:
            self._released = True
            for table, view, owned in self._shared.values():
                table.unshare(owned, view)
            self._shared = {}
