"""The timer service functions use (Flink's ``TimerService``), and where its timers are kept.

Each timer service keeps its timers as two keyed states of kind ``timers``, one per time domain,
named ``_timers/<service>/<domain>``. Functions use the service ``user``; the windows library has
its own. Timers fire at the end of each epoch (``KeyedTask.fire_timers``): event-time timers up
to the epoch's watermark, then processing-time timers up to the epoch's processing time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekit.spi.backend import KeyedStateBackend
from statekit.spi.descriptors import TIMER_STATE_PREFIX
from statekit.spi.errors import ConfigurationError
from statekit.spi.serializer import TypeSerializer
from statekit.spi.state import VOID_NAMESPACE
from statekit.spi.timers import MIN_TIMESTAMP, TimeDomain

#: the timer service of ``ctx.timer_service()``
USER_TIMERS = "user"


def timer_state_name(service: str, domain: TimeDomain) -> str:
    return f"{TIMER_STATE_PREFIX}{service}/{domain.value}"


def domain_of(state_name: str) -> TimeDomain | None:
    """The time domain of a timer state's name; None for any other state."""
    if not state_name.startswith(TIMER_STATE_PREFIX):
        return None
    suffix = state_name.rsplit("/", 1)[-1]
    return next((domain for domain in TimeDomain if domain.value == suffix), None)


@dataclass
class EpochTime:
    """The times of the running epoch, both recorded so that a replayed epoch sees the same."""

    processing_time_ms: int = 0
    #: the event time up to which the input is complete; timers at or before it fire this epoch
    watermark_ms: int = MIN_TIMESTAMP
    #: the Spark type of the job's event-time column when it is a timestamp (``event_time.TIMESTAMP_TYPES``);
    #: None for epoch milliseconds, or where the runner does not know it
    event_time_type: str | None = None
    #: timers registered this epoch (calls: registering an existing timer again counts too)
    timers_registered: int = 0


class TimerService:
    """Register and delete timers of the current key; ``on_timer`` is called when they fire.

    A timer is (key, namespace, timestamp): registering the same one twice keeps one, as in
    Flink. Timestamps are epoch milliseconds. ``namespace`` is for libraries that scope timers
    (the windows library uses the window); functions leave it out."""

    def __init__(self, backend: KeyedStateBackend, time: EpochTime, name: str = USER_TIMERS,
                 namespace_serializer: TypeSerializer | None = None) -> None:
        if not name or "/" in name:
            raise ConfigurationError(f"a timer service name is a non-empty string without '/', got {name!r}")
        self._time = time
        self._event = backend.create_timer_queue(timer_state_name(name, TimeDomain.EVENT_TIME), namespace_serializer)
        self._processing = backend.create_timer_queue(timer_state_name(name, TimeDomain.PROCESSING_TIME),
                                                      namespace_serializer)

    def current_watermark(self) -> int:
        """The epoch's watermark (``spi.timers.MIN_TIMESTAMP`` until event time is known)."""
        return self._time.watermark_ms

    def current_processing_time(self) -> int:
        """The epoch's processing time: recorded with its checkpoint, the same when replayed."""
        return self._time.processing_time_ms

    def register_event_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        """Fires at the end of the first epoch whose watermark is at or after ``timestamp``."""
        self._event.add(timestamp, namespace)
        self._time.timers_registered += 1

    def register_processing_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        """Fires at the end of the first epoch whose processing time is at or after ``timestamp``."""
        self._processing.add(timestamp, namespace)
        self._time.timers_registered += 1

    def delete_event_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        self._event.remove(timestamp, namespace)

    def delete_processing_time_timer(self, timestamp: int, namespace: Any = VOID_NAMESPACE) -> None:
        self._processing.remove(timestamp, namespace)
