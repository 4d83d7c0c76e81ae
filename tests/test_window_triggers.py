"""Triggers, evictors, global windows and element-aware assigners, by Flink's ``WindowOperatorTest``
and ``EvictingWindowOperatorTest``: each
test replays one of its scenarios step by step in a ``KeyedHarness`` (elements, watermarks and
processing times interleaved, a snapshot restored into a new function instance, and into another
backend) on every backend, and expects Flink's outputs. A window's output row carries its last
millisecond, where Flink's output record has it as its timestamp."""
from __future__ import annotations

import pytest

from statekit import windows
from statekit.backends.heap import HeapStateBackend
from statekit.backends.lmdb import LMDBStateBackend
from statekit.backends.rocksdb import RocksDBStateBackend
from statekit.spi import ConfigurationError, ReducingStateDescriptor
from statekit.testing import KeyedHarness
from statekit.windows import TimeDomain, TimeWindow

GLOBAL_END = windows.GLOBAL_WINDOW.max_timestamp


Sum = windows.Sum


def summed(assigner, trigger=None, **options):
    """Flink's SUM: ``(key, sum, the window's last millisecond)``."""
    return windows.aggregate(assigner, Sum(), timestamp="ts", value=lambda row: row["v"], trigger=trigger,
                             emit=lambda key, window, total: (key, total, window.max_timestamp), **options)


def sessions_of(assigner, trigger=None, **options):
    """Flink's session output: ``("<key>-<sum>", start, end)``."""
    return windows.aggregate(assigner, Sum(), timestamp="ts", value=lambda row: row["v"], trigger=trigger,
                             emit=lambda key, window, total: (f"{key}-{total}", window.start, window.end), **options)


@pytest.fixture(params=["heap", "rocksdb", "lmdb"])
def backends(request, tmp_path):
    """A backend to start on and another to restore into (the next in heap -> rocksdb -> lmdb -> heap)."""
    make = {"heap": lambda d: HeapStateBackend(),
            "rocksdb": lambda d: RocksDBStateBackend(**{"local-dir": str(tmp_path / f"rocksdb-{d}")}),
            "lmdb": lambda d: LMDBStateBackend(**{"local-dir": str(tmp_path / f"lmdb-{d}"), "map-size": "64k"})}
    names = list(make)
    after = names[(names.index(request.param) + 1) % len(names)]
    return make[request.param]("first"), make[after]("second")


class Steps:
    """A function stepped in a harness, with ``restart`` as Flink's snapshot and restore into a new
    operator: a new instance of the function, on the other backend."""

    def __init__(self, make_function, backends):
        self._make, (self._first, self._second) = make_function, backends
        self.harness = KeyedHarness(make_function(), lambda row: row["k"], state_backend=self._first)

    def elements(self, *elements):
        for key, value, timestamp in elements:
            self.harness.process_element({"k": key, "v": value, "ts": timestamp})
        return self

    def watermark(self, watermark_ms):
        self.harness.process_watermark(watermark_ms)
        return self

    def processing_time(self, time_ms):
        self.harness.set_processing_time(time_ms)
        return self

    def output(self):
        return sorted(self.harness.take_output())

    def late(self):
        """The side output of late elements since the last call, as (key, value, timestamp)."""
        return sorted((row["k"], row["v"], row["ts"]) for row in self.harness.take_late_output())

    def restart(self):
        snapshot = self.harness.snapshot()
        self.harness.close()
        self.harness = KeyedHarness.restored(snapshot, self._make(), lambda row: row["k"], state_backend=self._second)
        return self

    def close(self):
        self.harness.close()


#: Flink's eight elements shared by several tests (key, value, timestamp)
I8 = [("key2", 1, 3999), ("key2", 1, 3000), ("key1", 1, 20), ("key1", 1, 0), ("key1", 1, 999), ("key2", 1, 1998),
      ("key2", 1, 1999), ("key2", 1, 1000)]


def test_tumbling_event_time_windows(backends):
    """testTumblingEventTimeWindowsReduce: the default event-time trigger, through a restore."""
    steps = Steps(lambda: summed(windows.TumblingWindows.of("3 seconds")), backends).elements(*I8)
    assert steps.watermark(999).watermark(1999).output() == []
    steps.restart()
    assert steps.watermark(2999).output() == [("key1", 3, 2999), ("key2", 3, 2999)]
    assert steps.watermark(3999).watermark(4999).output() == []
    assert steps.watermark(5999).output() == [("key2", 2, 5999)]
    assert steps.watermark(6999).watermark(7999).output() == []
    steps.close()


def test_session_windows_with_a_purging_count_trigger(backends):
    """testSessionWindowsWithCountTrigger: a session fires and purges on its 4th element; two
    sessions of 3 elements each are merged by a bridging element, their counts merged too (3 + 3,
    plus 1), so the merged session fires at once."""
    steps = Steps(lambda: sessions_of(windows.SessionWindows.with_gap("3 seconds"),
                                      windows.PurgingTrigger.of(windows.CountTrigger.of(4))), backends)
    steps.elements(("key2", 1, 0), ("key2", 2, 1000), ("key2", 3, 2500))
    assert steps.output() == []
    assert steps.elements(("key2", 4, 3500)).output() == [("key2-10", 0, 6500)]
    steps.elements(("key1", 1, 10), ("key1", 2, 1000)).restart()
    assert steps.elements(("key1", 3, 2500), ("key1", 1, 6000), ("key1", 2, 6500), ("key1", 3, 7000)).output() == []
    assert steps.elements(("key1", 10, 4500)).output() == [("key1-22", 10, 10000)]
    steps.close()


def test_session_windows_with_a_continuous_event_time_trigger(backends):
    """testSessionWindowsWithContinuousEventTimeTrigger: early firings every 2 s of event time while
    the sessions grow, across a restore; the timers of sessions merged away are ignored."""
    steps = Steps(lambda: sessions_of(windows.SessionWindows.with_gap("3 seconds"),
                                      windows.ContinuousEventTimeTrigger.of("2 seconds")), backends)
    steps.elements(("key1", 1, 1500), ("key2", 1, 0), ("key2", 3, 2500), ("key2", 2, 1000))
    assert steps.watermark(2500).output() == [("key1-1", 1500, 4500), ("key2-6", 0, 5500)]
    assert steps.elements(("key2", 5, 4000)).watermark(3000).output() == []
    steps.restart().elements(("key1", 2, 4000), ("key2", 4, 3500))
    assert steps.watermark(4000).output() == [("key1-3", 1500, 7000), ("key2-15", 0, 7000)]
    steps.close()


class PointSessions(windows.SessionWindows):
    """Flink's PointSessionWindows: an element of value 33 is a point ``[t, t)``, the others open
    ``[t, t + gap)``."""

    def assign_element(self, element, timestamp):
        if element["v"] == 33:
            return [TimeWindow(timestamp, timestamp)]
        return super().assign_element(element, timestamp)


def test_point_sessions_by_an_assigner_that_sees_the_row(backends):
    """testPointSessions: points inside a session join it."""
    steps = Steps(lambda: sessions_of(PointSessions(3000)), backends)
    steps.elements(("key2", 1, 0), ("key2", 33, 1000)).restart()
    steps.elements(("key2", 33, 2500), ("key1", 1, 10), ("key1", 2, 1000), ("key1", 33, 2500))
    assert steps.watermark(12000).output() == [("key1-36", 10, 4000), ("key2-67", 0, 3000)]
    steps.close()


def test_global_windows_with_a_continuous_event_time_trigger(backends):
    """testContinuousWatermarkTrigger: a global window fires every 3 s of event time, keeping its
    contents."""
    steps = Steps(lambda: summed(windows.GlobalWindows.create(), windows.ContinuousEventTimeTrigger.of("3 seconds")),
                  backends)
    steps.elements(("key1", 1, 0), ("key2", 1, 3000), ("key2", 1, 3999), ("key1", 1, 20), ("key1", 1, 999),
                   ("key2", 1, 1998), ("key2", 1, 1999), ("key2", 1, 1000))
    assert steps.watermark(1000).watermark(2000).output() == []
    assert steps.watermark(3000).output() == [("key1", 3, GLOBAL_END)]
    steps.restart()
    assert steps.watermark(4000).watermark(5000).output() == []
    assert steps.watermark(6000).output() == [("key1", 3, GLOBAL_END), ("key2", 5, GLOBAL_END)]
    assert steps.watermark(7000).watermark(8000).output() == []
    steps.close()


def test_global_windows_with_a_purging_count_trigger(backends):
    """testCountTrigger: every 4 elements of a key fire and purge its global window."""
    steps = Steps(lambda: summed(windows.GlobalWindows.create(), windows.PurgingTrigger.of(windows.CountTrigger.of(4))),
                  backends)
    steps.elements(("key2", 1, 3000), ("key2", 1, 3999), ("key1", 1, 20), ("key1", 1, 0), ("key1", 1, 999),
                   ("key2", 1, 1998))
    assert steps.output() == []
    assert steps.elements(("key2", 1, 1999)).output() == [("key2", 4, GLOBAL_END)]
    steps.restart()
    assert steps.elements(("key2", 1, 1000)).output() == []
    assert steps.elements(("key1", 1, 10999)).output() == [("key1", 4, GLOBAL_END)]
    assert steps.elements(("key2", 1, 1000), ("key2", 1, 1000), ("key2", 1, 1000)).output() == [("key2", 4, GLOBAL_END)]
    steps.close()


def test_global_windows_fire_at_the_end_of_input_with_an_event_time_trigger(backends):
    """testEndOfStreamTrigger: a global window with the event-time trigger fires when the input ends."""
    steps = Steps(lambda: summed(windows.GlobalWindows.create(), windows.EventTimeTrigger()), backends).elements(*I8)
    assert steps.watermark(10_000).output() == []
    steps.restart().harness.end_input()
    assert steps.output() == [("key1", 3, GLOBAL_END), ("key2", 5, GLOBAL_END)]
    steps.close()


def test_event_time_sessions_with_a_dynamic_gap(backends):
    """testDynamicEventTimeSessionWindows: key1's gap is 3 s, key2's 1 s for a value of 10, else 2 s."""
    def gap(row):
        return 3000 if row["k"] == "key1" else 1000 if row["v"] == 10 else 2000

    steps = Steps(lambda: sessions_of(windows.SessionWindows.with_dynamic_gap(gap)), backends)
    steps.elements(("key1", 3, 10), ("key2", 4, 5000), ("key2", 5, 6000))
    assert steps.watermark(8999).output() == [("key1-3", 10, 3010), ("key2-9", 5000, 8000)]
    steps.restart().elements(("key2", 1, 9000), ("key2", 2, 10000), ("key2", 10, 10500))
    assert steps.watermark(12999).output() == [("key2-13", 9000, 12000)]
    steps.elements(("key2", 10, 13000), ("key2", 10, 13500), ("key2", 1, 14000))
    assert steps.watermark(16999).output() == [("key2-21", 13000, 16000)]
    steps.close()


def test_processing_time_tumbling_windows(backends):
    """testProcessingTimeTumblingWindows: elements fall in the window of the processing time."""
    steps = Steps(lambda: summed(windows.TumblingWindows.of("3 seconds", domain=TimeDomain.PROCESSING_TIME)),
                  backends)
    steps.processing_time(3).elements(*[("key2", 1, 0)] * 3, *[("key1", 1, 0)] * 2)
    assert steps.processing_time(5000).output() == [("key1", 2, 2999), ("key2", 3, 2999)]
    steps.restart().elements(*[("key1", 1, 0)] * 3)
    assert steps.processing_time(7000).output() == [("key1", 3, 5999)]
    steps.close()


def test_processing_time_session_windows(backends):
    """testProcessingTimeSessionWindows."""
    steps = Steps(lambda: summed(windows.SessionWindows.with_gap("3 seconds", domain=TimeDomain.PROCESSING_TIME)),
                  backends)
    steps.processing_time(3).elements(("key2", 1, 0))
    steps.processing_time(1000).elements(("key2", 1, 0))
    assert steps.processing_time(5000).output() == [("key2", 2, 3999)]
    steps.restart().elements(("key2", 1, 0), ("key2", 1, 0), ("key1", 1, 0), ("key1", 1, 0), ("key1", 1, 0))
    assert steps.processing_time(10000).output() == [("key1", 3, 7999), ("key2", 2, 7999)]
    steps.close()


class FireEveryElement(windows.Trigger):
    """A trigger of one's own, with state of its own: fires on every second element of a window."""

    SEEN = ReducingStateDescriptor("seen", lambda a, b: a + b)

    def on_element(self, element, timestamp, window, ctx):
        seen = ctx.get_state(self.SEEN)
        seen.add(1)
        return windows.TriggerResult.FIRE if seen.get() % 2 == 0 else windows.TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return windows.TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return windows.TriggerResult.CONTINUE

    def clear(self, window, ctx):
        ctx.get_state(self.SEEN).clear()


def test_a_trigger_of_ones_own_keeps_state_per_window_through_a_restore(backends):
    steps = Steps(lambda: summed(windows.TumblingWindows.of("1 second"), FireEveryElement()), backends)
    assert steps.elements(("a", 1, 10), ("a", 2, 1500)).output() == []
    steps.restart()
    assert steps.elements(("a", 4, 20)).output() == [("a", 5, 999)]
    assert steps.elements(("a", 8, 1600)).output() == [("a", 10, 1999)]
    assert steps.watermark(999).output() == []  # the window ends; the trigger never fires on time
    assert steps.elements(("a", 16, 1700), ("a", 32, 1800)).output() == [("a", 58, 1999)]
    steps.close()


def test_bad_triggers_are_refused_naming_the_fix():
    sessions = windows.SessionWindows.with_gap("1 minute")
    with pytest.raises(ConfigurationError, match="cannot merge windows"):
        windows.aggregate(sessions, Sum(), timestamp="ts", trigger=FireEveryElement())
    with pytest.raises(ConfigurationError, match="trigger= needs a Trigger"):
        windows.aggregate(sessions, Sum(), timestamp="ts", trigger="count")
    with pytest.raises(ConfigurationError, match="positive int count"):
        windows.CountTrigger.of(0)
    with pytest.raises(ConfigurationError, match="timestamp="):
        windows.aggregate(windows.GlobalWindows.create(), Sum(), trigger=windows.ContinuousEventTimeTrigger.of("1 s"))
    with pytest.raises(ConfigurationError, match="allowed_lateness"):
        windows.aggregate(windows.GlobalWindows.create(), Sum(), timestamp="ts", allowed_lateness="1 s",
                          trigger=windows.CountTrigger.of(2))


def test_the_harness_moves_time_forward_only_and_keeps_its_times_through_a_snapshot():
    function = summed(windows.TumblingWindows.of("1 second"))
    with KeyedHarness(function, lambda row: row["k"]) as harness:
        harness.set_processing_time(50)
        harness.process_watermark(100)
        with pytest.raises(ConfigurationError, match="watermark moves forward only"):
            harness.process_watermark(99)
        with pytest.raises(ConfigurationError, match="processing time moves forward only"):
            harness.set_processing_time(49)
        harness.process_element({"k": "a", "ts": 500, "v": 1})
        snapshot = harness.snapshot()
    with KeyedHarness.restored(snapshot, summed(windows.TumblingWindows.of("1 second")), lambda row: row["k"]) as again:
        assert (again.watermark_ms, again.processing_time_ms) == (100, 50)
        again.process_watermark(999)
        assert again.take_output() == [("a", 1, 999)]


class SumOfElements(windows.ProcessWindowFunction):
    """Flink's SUM over the elements a window keeps: ``(key, sum, the window's last millisecond)``."""

    def process(self, key, window, elements, ctx):
        yield key, sum(elements), window.max_timestamp


def evicting(assigner, trigger, evictor, timestamp="ts"):
    return windows.process(assigner, SumOfElements(), timestamp=timestamp, value=lambda row: row["v"],
                           trigger=trigger, evictor=evictor)


FIRST_EIGHT = [("key2", 1, 3000), ("key2", 1, 3999), ("key1", 1, 20), ("key1", 1, 0), ("key1", 1, 999),
               ("key2", 1, 1998), ("key2", 1, 1999), ("key2", 1, 1000)]


def _fired(steps, *elements):
    """The outputs of ``elements``, one at a time, in order (as Flink's harness lists them)."""
    found = []
    for element in elements:
        found += steps.elements(element).harness.take_output()
    return [(key, total) for key, total, _ in found]


@pytest.mark.parametrize("after,expected", [
    (True, [[("key2", 2), ("key1", 2), ("key2", 4)], [("key1", 4), ("key2", 6)], [("key2", 6)]]),  # EvictAfter
    (False, [[("key2", 2), ("key1", 2), ("key2", 4)], [("key1", 4), ("key2", 4)], [("key2", 4)]]),  # testCountTrigger
], ids=["after", "before"])
def test_count_evictor_on_global_windows(backends, after, expected):
    """EvictingWindowOperatorTest testCountEvictorEvictAfter and testCountTrigger: every 2 elements
    fire (the window keeps them), keeping the last 4 after or before the function ran."""
    steps = Steps(lambda: evicting(windows.GlobalWindows.create(), windows.CountTrigger.of(2),
                                   windows.CountEvictor.of(4, after=after)), backends)
    assert _fired(steps, *FIRST_EIGHT) == expected[0]
    steps.restart()
    assert _fired(steps, ("key1", 1, 10999), ("key2", 1, 1000)) == expected[1]
    assert _fired(steps, ("key2", 1, 1000), ("key2", 1, 1000)) == expected[2]
    steps.close()


@pytest.mark.parametrize("timestamp,expected", [
    ("ts", [[("key2", 2), ("key1", 2), ("key2", 3)], [("key1", 4), ("key2", 5)]]),  # testTimeEvictorEvictAfter
    (None, [[("key2", 2), ("key1", 2), ("key2", 4)], [("key1", 4), ("key2", 6)]]),  # testTimeEvictorNoTimestamp
], ids=["event-time", "no-timestamps"])
def test_time_evictor_after_on_global_windows(backends, timestamp, expected):
    """testTimeEvictorEvictAfter: after each firing, the elements 2 s or more older than the newest
    go; without event times (testTimeEvictorNoTimestamp) none does."""
    steps = Steps(lambda: evicting(windows.GlobalWindows.create(), windows.CountTrigger.of(2),
                                   windows.TimeEvictor.of("2 seconds", after=True), timestamp=timestamp), backends)
    assert _fired(steps, ("key2", 1, 1000), ("key2", 1, 4000), ("key1", 1, 20), ("key1", 1, 0), ("key1", 1, 999),
                  ("key2", 1, 3500), ("key2", 1, 2001), ("key2", 1, 1001)) == expected[0]
    steps.restart()
    assert _fired(steps, ("key1", 1, 10999), ("key2", 1, 1002)) == expected[1]
    steps.close()


def test_time_evictor_before_on_tumbling_windows(backends):
    """testTimeEvictorEvictBefore: the function sees only the elements within 2 s of the newest."""
    steps = Steps(lambda: evicting(windows.TumblingWindows.of("4 seconds"), windows.CountTrigger.of(2),
                                   windows.TimeEvictor.of("2 seconds")), backends)
    steps.elements(("key2", 1, 1000), ("key2", 1, 3999), ("key1", 1, 20), ("key1", 1, 0), ("key1", 1, 999),
                   ("key1", 1, 5999), ("key2", 1, 3500), ("key2", 1, 2001), ("key2", 1, 1001))
    assert steps.output() == [("key1", 2, 3999), ("key2", 1, 3999), ("key2", 3, 3999)]
    steps.restart()
    assert steps.elements(("key1", 1, 6500), ("key2", 1, 1002)).output() == [("key1", 2, 7999), ("key2", 3, 3999)]
    steps.close()


@pytest.mark.parametrize("after,last,expected", [
    (False, ("key1", 3, 10999), [[("key2", 4), ("key1", 2), ("key2", 11)], [("key1", 8), ("key2", 10)]]),
    (True, ("key1", 9, 10999), [[("key2", 5), ("key1", 2), ("key2", 15)], [("key1", 16), ("key2", 22)]]),
], ids=["before", "after"])
def test_delta_evictor_on_global_windows(backends, after, last, expected):
    """testDeltaEvictorEvictBefore and ...EvictAfter: the elements 2 or more below the last one go."""
    steps = Steps(lambda: evicting(windows.GlobalWindows.create(), windows.CountTrigger.of(2),
                                   windows.DeltaEvictor.of(2, lambda value, newest: newest - value, after=after)),
                  backends)
    assert _fired(steps, ("key2", 1, 3000), ("key2", 4, 3999), ("key1", 1, 20), ("key1", 1, 0), ("key1", 5, 999),
                  ("key2", 5, 1998), ("key2", 6, 1999), ("key2", 1, 1000)) == expected[0]
    steps.restart()
    assert _fired(steps, last, ("key2", 10, 1000)) == expected[1]
    steps.close()


def test_count_evictor_on_tumbling_event_time_windows(backends):
    """testTumblingWindowWithApply: a window of 6 elements fires with its last 4."""
    steps = Steps(lambda: evicting(windows.TumblingWindows.of("4 seconds"), None, windows.CountEvictor.of(4)),
                  backends)
    steps.elements(("key1", 1, 10), ("key1", 1, 100)).watermark(1999)
    steps.restart().elements(("key1", 1, 1997), ("key1", 1, 1998), ("key1", 1, 2310), ("key1", 1, 2310),
                             ("key2", 1, 2310), ("key2", 1, 2310))
    assert steps.watermark(3999).output() == [("key1", 4, 3999), ("key2", 2, 3999)]
    steps.close()


def test_bad_evictors_are_refused():
    with pytest.raises(ConfigurationError, match="evictor= needs an Evictor"):
        evicting(windows.GlobalWindows.create(), windows.CountTrigger.of(2), "last 4")
    with pytest.raises(ConfigurationError, match="count of 0 or more"):
        windows.CountEvictor.of(-1)
    with pytest.raises(ConfigurationError, match="delta function"):
        windows.DeltaEvictor.of(2, 3)


def test_sliding_event_time_windows(backends):
    """testSlidingEventTimeWindowsReduce."""
    steps = Steps(lambda: summed(windows.SlidingWindows.of("3 seconds", "1 second")), backends).elements(*I8)
    assert steps.watermark(999).output() == [("key1", 3, 999)]
    assert steps.watermark(1999).output() == [("key1", 3, 1999), ("key2", 3, 1999)]
    assert steps.watermark(2999).output() == [("key1", 3, 2999), ("key2", 3, 2999)]
    steps.restart()
    assert steps.watermark(3999).output() == [("key2", 5, 3999)]
    assert steps.watermark(4999).output() == [("key2", 2, 4999)]
    assert steps.watermark(5999).output() == [("key2", 2, 5999)]
    assert steps.watermark(6999).watermark(7999).output() == []
    steps.close()


def test_event_time_session_windows(backends):
    """testSessionWindows."""
    steps = Steps(lambda: sessions_of(windows.SessionWindows.with_gap("3 seconds")), backends)
    steps.elements(("key2", 1, 0), ("key2", 2, 1000), ("key2", 3, 2500), ("key1", 1, 10), ("key1", 2, 1000)).restart()
    steps.elements(("key1", 3, 2500), ("key2", 4, 5501), ("key2", 5, 6000), ("key2", 5, 6000), ("key2", 6, 6050))
    assert steps.watermark(12000).output() == [("key1-6", 10, 5500), ("key2-20", 5501, 9050), ("key2-6", 0, 5500)]
    steps.elements(("key2", 10, 15000), ("key2", 20, 15000))
    assert steps.watermark(17999).output() == [("key2-30", 15000, 18000)]
    steps.close()


def test_processing_time_sliding_windows(backends):
    """testProcessingTimeSlidingWindows."""
    steps = Steps(lambda: summed(windows.SlidingWindows.of("3 seconds", "1 second",
                                                            domain=TimeDomain.PROCESSING_TIME)), backends)
    steps.processing_time(3).elements(("key2", 1, 0))
    assert steps.processing_time(1000).output() == [("key2", 1, 999)]
    steps.elements(("key2", 1, 0), ("key2", 1, 0))
    assert steps.processing_time(2000).output() == [("key2", 3, 1999)]
    steps.restart().elements(("key1", 1, 0), ("key1", 1, 0))
    assert steps.processing_time(3000).output() == [("key1", 2, 2999), ("key2", 3, 2999)]
    steps.elements(("key1", 1, 0), ("key1", 1, 0), ("key1", 1, 0))
    assert steps.processing_time(7000).output() == [("key1", 3, 5999), ("key1", 5, 3999), ("key1", 5, 4999),
                                                    ("key2", 2, 3999)]
    steps.close()


def test_lateness_with_a_purging_event_time_trigger(backends):
    """testLateness (main output): an element late by the watermark but within its window's
    lateness fires the window again at once (and purges it); one past the lateness is dropped."""
    steps = Steps(lambda: summed(windows.TumblingWindows.of("2 seconds"),
                                 windows.PurgingTrigger.of(windows.EventTimeTrigger()), allowed_lateness="500 ms"),
                  backends)
    steps.elements(("key2", 1, 500)).watermark(1500).elements(("key2", 1, 1300))
    assert steps.watermark(2300).output() == [("key2", 2, 1999)]
    assert steps.elements(("key2", 1, 1997)).output() == [("key2", 1, 1999)]
    steps.restart()
    assert steps.watermark(6000).elements(("key2", 1, 1998)).watermark(7000).output() == []
    assert steps.late() == [("key2", 1, 1998)], "past the lateness: the side output"
    steps.close()


def test_side_output_of_late_elements_of_tumbling_windows(backends):
    """testSideOutputDueToLatenessTumbling: an element whose window the watermark passed goes to
    the side output; one whose window is open does not, even behind the watermark."""
    steps = Steps(lambda: summed(windows.TumblingWindows.of("2 seconds")), backends)
    steps.elements(("key2", 1, 1000)).watermark(1985).elements(("key2", 1, 1980))
    assert steps.watermark(1999).output() == [("key2", 2, 1999)]
    assert steps.late() == [], "1980 was behind the watermark 1985, in a window that had not ended"
    assert steps.elements(("key2", 1, 1998)).late() == [("key2", 1, 1998)]
    steps.restart().elements(("key2", 1, 2001))
    assert steps.watermark(2999).watermark(3999).output() == [("key2", 1, 3999)]
    assert steps.late() == []
    steps.close()


def test_side_output_of_late_elements_of_sliding_windows(backends):
    """testSideOutputDueToLatenessSliding: an element goes into those of its sliding windows the
    watermark has not passed (2400 misses [0, 3000) at watermark 3000, joins the next two), and to
    the side output only when it missed all of them."""
    steps = Steps(lambda: summed(windows.SlidingWindows.of("3 seconds", "1 second")), backends)
    assert steps.elements(("key2", 1, 1000)).watermark(1999).output() == [("key2", 1, 1999)]
    assert steps.elements(("key2", 1, 2000)).watermark(3000).output() == [("key2", 2, 2999)]
    steps.elements(("key1", 1, 3001), ("key2", 1, 2400), ("key2", 1, 2400)).restart()
    steps.elements(("key1", 1, 3001), ("key2", 1, 3900))
    assert steps.watermark(6000).output() == [("key1", 2, 3999), ("key1", 2, 4999), ("key1", 2, 5999),
                                              ("key2", 1, 5999), ("key2", 4, 4999), ("key2", 5, 3999)]
    assert steps.late() == []
    assert steps.elements(("key1", 1, 3001)).late() == [("key1", 1, 3001)]
    assert steps.watermark(25000).output() == []
    steps.close()


def _session_prefix(steps):
    """The steps every session-lateness test of Flink's starts with (sessions of 3 s)."""
    steps.elements(("key2", 1, 1000)).watermark(1999).elements(("key2", 1, 2000)).watermark(4998)
    steps.elements(("key2", 1, 4500), ("key2", 1, 8500)).watermark(7400).elements(("key2", 1, 7000))
    assert steps.watermark(11501).output() == [("key2-5", 1000, 11500)]
    steps.restart().elements(("key2", 1, 11600))
    assert steps.watermark(14600).output() == [("key2-1", 11600, 14600)]


@pytest.mark.parametrize("lateness,purging,late_outputs,end_output", [
    ("0 ms", False, [], ("key2-1", 14500, 17500)),  # testSideOutputDueToLatenessSessionZeroLateness
    ("0 ms", True, [], ("key2-1", 14500, 17500)),  # ...SessionZeroLatenessPurgingTrigger
    ("10 ms", True, [("key2-1", 10000, 14600)], ("key2-1", 10000, 17500)),  # testDropDueToLatenessSessionWith...
    ("10 ms", False, [("key2-2", 10000, 14600)], ("key2-3", 10000, 17500)),  # testNotSideOutputDueToLateness...
    ("10 s", True, [("key2-1", 1000, 14600)], ("key2-1", 1000, 17500)),  # ...WithHugeLatenessPurgingTrigger
    ("10 s", False, [("key2-7", 1000, 14600)], ("key2-8", 1000, 17500)),  # ...WithHugeLateness
], ids=["zero", "zero-purging", "10ms-purging", "10ms", "huge-purging", "huge"])
def test_late_elements_of_sessions(backends, lateness, purging, late_outputs, end_output):
    """Flink's session lateness tests (main output): an element late by the watermark joins a
    session that is still within its lateness, firing it at once; with no such session it is dropped."""
    trigger = windows.PurgingTrigger.of(windows.EventTimeTrigger()) if purging else None
    steps = Steps(lambda: sessions_of(windows.SessionWindows.with_gap("3 seconds"), trigger,
                                      allowed_lateness=lateness), backends)
    _session_prefix(steps)
    assert steps.elements(("key2", 1, 10000)).output() == late_outputs
    late = [("key2", 1, 10000)] if lateness == "0 ms" else []  # no live session to join: the side output
    if lateness == "0 ms" and purging:
        assert steps.elements(("key2", 1, 10100)).output() == []  # late as well: the two do not merge
        late.append(("key2", 1, 10100))
    assert steps.late() == late
    assert steps.elements(("key2", 1, 14500)).output() == []
    assert steps.watermark(20000).output() == [end_output]
    assert steps.watermark(100000).output() == []
    steps.close()


def test_a_window_fires_once_and_is_cleaned_up_after_its_lateness(backends):
    """testCleanupTimerWithEmptyReduceStateForTumblingWindows (outputs): nothing fires again when
    the cleanup timer clears the window."""
    steps = Steps(lambda: summed(windows.TumblingWindows.of("2 seconds"), allowed_lateness="1 ms"), backends)
    assert steps.elements(("key2", 1, 1000)).watermark(1599).output() == []
    assert steps.watermark(1999).output() == [("key2", 1, 1999)]
    steps.restart()
    assert steps.watermark(2000).watermark(5000).output() == []
    steps.close()


def test_trigger_and_evictor_state_survive_a_rescale_and_a_backend_switch(tmp_path):
    """A count trigger's counts and an evicting window's elements are keyed state in the window's
    namespace: carried through a savepoint into another backend and through rescales 3 -> 5 -> 2
    on the local runner, the outputs are those of one uninterrupted run."""
    import random

    from statekit.runtime import LocalRunner

    rng = random.Random(3)
    epochs = [[{"k": f"k{rng.randrange(7)}", "v": rng.randrange(100)} for _ in range(40)] for _ in range(6)]
    seen: dict = {}
    expected = []
    for rows in epochs:
        out = []
        for row in rows:
            values = seen.setdefault(row["k"], [])
            values.append(row["v"])
            if len(values) % 3 == 0:
                out.append((row["k"], sum(values[-2:]), GLOBAL_END))  # every 3rd element, the last 2 kept
        expected.append(sorted(out))

    def function():
        return windows.process(windows.GlobalWindows.create(), SumOfElements(), value=lambda row: row["v"],
                               trigger=windows.CountTrigger.of(3), evictor=windows.CountEvictor.of(2))

    def run(backend, parallelism):
        return LocalRunner(function(), lambda row: row["k"], parallelism=parallelism, max_parallelism=32,
                           state_backend=backend)

    heap = run(HeapStateBackend(), 3)
    found = [sorted(heap.run_epoch(rows)) for rows in epochs[:2]]
    switched = run(RocksDBStateBackend(**{"local-dir": str(tmp_path / "rocksdb")}), 5)
    switched.restore_from(heap.savepoint(), heap.streams)
    found += [sorted(switched.run_epoch(rows)) for rows in epochs[2:4]]
    switched.rescale(2)
    found += [sorted(switched.run_epoch(rows)) for rows in epochs[4:]]
    assert found == expected
