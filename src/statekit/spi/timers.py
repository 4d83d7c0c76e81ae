"""Timers as keyed state (Flink's ``InternalTimerService`` over priority-queue state).

A timer is (key, namespace, timestamp): registering the same one twice keeps one. A keyed
backend keeps the timers of each timer service and time domain in a ``TimerQueue``, as state of
kind ``timers``: they are part of every snapshot (full, incremental, canonical savepoint), and
move with their key group when the parallelism changes.

Every backend fires timers in the same order: by timestamp, then key group, then the serialized
key and namespace (the order of ``key_layout.timer_index_key``). A replayed epoch, a restored
job and a job switched to another backend therefore fire the same timers in the same order.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from statekit.spi.state import VOID_NAMESPACE

#: the smallest timestamp: the watermark before any event time is known
MIN_TIMESTAMP = -(1 << 63)
#: the largest timestamp a timer may have
MAX_TIMESTAMP = (1 << 63) - 1


class TimeDomain(str, enum.Enum):
    #: fires when the watermark reaches the timestamp
    EVENT_TIME = "event-time"
    #: fires when the epoch's processing time reaches the timestamp
    PROCESSING_TIME = "processing-time"


@dataclass(frozen=True)
class Timer:
    timestamp: int
    key: Any
    key_group: int
    namespace: Any = VOID_NAMESPACE


class TimerQueue(ABC):
    """The timers of one timer state in a keyed backend's key-group range. ``add`` and ``remove``
    act on the backend's current key; writes follow the backend's snapshot rules (a pending
    snapshot does not see later ones)."""

    @abstractmethod
    def add(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        """Register a timer of the current key; one that exists already stays as it is."""

    @abstractmethod
    def remove(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        """Delete a timer of the current key, if it exists."""

    @abstractmethod
    def poll(self, up_to: int) -> Timer | None:
        """Remove and return the first timer (in the order of the module docstring) whose timestamp
        is at most ``up_to``; None when there is none."""

    @abstractmethod
    def peek_timestamp(self) -> int | None:
        """The earliest timestamp of any timer in the range; None when there are no timers."""


def check_timestamp(timestamp: Any) -> int:
    """``timestamp`` as an int in the timer range, or a ``TypeError``/``ValueError`` naming it."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError(f"a timer's timestamp is an int of epoch milliseconds, got {timestamp!r} "
                        f"({type(timestamp).__name__})")
    if not MIN_TIMESTAMP <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"a timer's timestamp must fit in 64 bits, got {timestamp}")
    return timestamp
