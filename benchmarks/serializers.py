"""State values through ``RecordSerializer`` against msgpack (a dict with the field names) and
pickle (the dataclass), same values, same run: bytes per value and encode / decode time per value.

    python -m benchmarks.serializers [--values 20000] [--json FILE]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import decimal
import statistics
import time
from typing import Any, Callable, Optional

from benchmarks.report import record, report
from statekit.serializers import MsgpackSerializer, PickleSerializer
from statekit.serializers.record import RecordSerializer

UTC = datetime.timezone.utc


@dataclasses.dataclass
class Reading:
    """A small record: five fields, as a sensor pipeline keeps per key."""

    sensor: int
    value: float
    unit: str
    at: datetime.datetime
    last: list[int]


@dataclasses.dataclass
class Place:
    lat: float
    lon: float
    label: Optional[str]


@dataclasses.dataclass
class Basket:
    """A nested record: a map, a nested record, a nullable decimal, a date."""

    per_item: dict[str, int]
    shipping: Place
    total: Optional[decimal.Decimal]
    day: datetime.date


def readings(n: int) -> list[Reading]:
    start = datetime.datetime(2026, 11, 28, tzinfo=UTC)
    return [Reading(i, i * 0.5, "celsius", start + datetime.timedelta(seconds=i), [i, i + 1, i + 2, i + 3, i + 4])
            for i in range(n)]


def baskets(n: int) -> list[Basket]:
    return [Basket({f"item-{j}": i + j for j in range(5)}, Place(52.5, 13.4, f"store {i % 10}"),
                   decimal.Decimal(i) / 4, datetime.date(2026, 1, 1) + datetime.timedelta(days=i % 365))
            for i in range(n)]


def _as_dict(value: Any) -> Any:
    """msgpack's form of a record: dicts with the field names, instants and decimals as numbers."""
    if dataclasses.is_dataclass(value):
        return {f.name: _as_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_as_dict(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_dict(v) for k, v in value.items()}
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, datetime.date):
        return value.toordinal()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _best_per_value(work: Callable[[], Any], n: int, rounds: int = 3) -> float:
    """Microseconds per value, the best of ``rounds`` runs over ``n`` values."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times) / n * 1e6


def _measure(serializer: Any, values: list[Any]) -> dict[str, float]:
    encoded = [serializer.serialize(v) for v in values]
    n = len(values)
    return {"bytes": statistics.fmean(len(b) for b in encoded),
            "encode_us": _best_per_value(lambda: [serializer.serialize(v) for v in values], n),
            "decode_us": _best_per_value(lambda: [serializer.deserialize(b) for b in encoded], n)}


def run(n_values: int = 20_000) -> list[dict]:
    results: list[dict] = []
    for shape, cls, values in (("small record", Reading, readings(n_values)),
                               ("nested record", Basket, baskets(n_values))):
        ours = _measure(RecordSerializer(cls), values)
        peers = {"msgpack dict": _measure(MsgpackSerializer(), [_as_dict(v) for v in values]),
                 "pickle": _measure(PickleSerializer(), values)}
        for peer, measured in peers.items():
            for what, unit in (("bytes", "B/value"), ("encode_us", "µs/value"), ("decode_us", "µs/value")):
                results.append(record(f"serializers {shape}: record {what.replace('_us', '')} vs {peer}",
                                      ours[what], measured[what], unit, group="serializers", better="lower",
                                      values=n_values))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=20_000)
    parser.add_argument("--json")
    args = parser.parse_args()
    report(run(args.values), args.json)


if __name__ == "__main__":
    main()
