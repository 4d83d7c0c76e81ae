"""Event-time windows on Spark with statekit (``make demo-windows``).

A streaming query reads sensor readings from a local directory, one file per micro-batch, with
event time in column ``ts`` and a watermark five minutes behind the latest reading. It keeps two
things per sensor in the RocksDB backend, on timers and windows (``examples/time_pipelines.py``):
the average temperature per event-time hour, emitted when the watermark passes the hour, and an
alert when two readings less than a minute apart differ by more than 20 degrees. Each micro-batch's
output is compared with a plain-Python recomputation of the same rules.
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from demo_session import demo_run  # noqa: E402
import time_pipelines as tp  # noqa: E402


def main() -> None:
    from statekit.spark import process_keyed_stream

    started = time.perf_counter()
    with demo_run("statekit-windows-demo", tp, **{"checkpoint.incremental": "true"}) as (spark, work):
        epochs = tp.sensor_epochs(8, 2_000, seed=3) + tp.closing_epochs("s00")
        source = os.path.join(work, "readings")
        os.makedirs(source)
        for number, rows in enumerate(epochs):
            path = os.path.join(source, f"readings-{number:02d}.json")
            with open(path, "w") as f:
                f.writelines(json.dumps({"sensor": s, "ts": ts, "temperature": t}) + "\n" for s, ts, t in rows)
            os.utime(path, (1_700_000_000 + number,) * 2)  # the file source takes the oldest file first
        print(f"statekit on Spark: {len(epochs)} micro-batches of sensor readings, event time 'ts', watermark "
              f"{tp.WATERMARK_DELAY} behind, RocksDB backend at parallelism 3")

        failures = []
        for label, function, output, oracle in (
                ("hourly averages", tp.hourly_average(), tp.HOURLY_OUTPUT, tp.expected_hourly),
                ("jump alerts", tp.JumpAlert(), tp.ALERT_OUTPUT, tp.expected_alerts)):
            expected = oracle(epochs)
            found: dict[int, list[tuple]] = {}

            def sink(out, batch_id, found=found):
                found[batch_id] = [tuple(row) for row in out.collect()]

            stream = spark.readStream.schema(tp.READINGS).option("maxFilesPerTrigger", 1).json(source)
            process_keyed_stream(stream, "sensor", function, output, sink, job_id=label.replace(" ", "-"),
                                 checkpoint_location=os.path.join(work, f"query-{label.replace(' ', '-')}"),
                                 trigger={"availableNow": True}, event_time="ts",
                                 watermark_delay=tp.WATERMARK_DELAY).awaitTermination()
            counts = [len(found.get(b, [])) for b in range(len(epochs))]
            print(f"  {label}: {sum(counts)} rows, per micro-batch {counts}")
            if label == "hourly averages":
                first = next(rows for _, rows in sorted(found.items()) if rows)
                for sensor, start, end, average in sorted(first)[:3]:
                    print(f"    e.g. {sensor} {time.strftime('%H:%M', time.gmtime(start / 1000))}-"
                          f"{time.strftime('%H:%M', time.gmtime(end / 1000))} UTC: {average:.2f} degrees")
            failures += [f"{label}, micro-batch {b}" for b in range(len(epochs))
                         if sorted(found.get(b, [])) != sorted(expected[b])]
        if failures:
            raise SystemExit(f"FAILED: output differs from the recomputation in {failures}")
        print(f"OK: every micro-batch's hourly averages and alerts match a plain-Python recomputation "
              f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
