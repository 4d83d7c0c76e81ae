"""Comparisons with an expectation whose failure messages say exactly what differs.

Assertions carry their own messages: pytest does not rewrite asserts in installed packages.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

EXAMPLES = 3


def _some(items: Iterable[Any]) -> list[Any]:
    return sorted(items, key=repr)[:EXAMPLES]


def state_difference(found: Mapping[Any, Any], expected: Mapping[Any, Any]) -> str | None:
    """What differs between two key -> state mappings (``None`` if nothing does)."""
    missing = expected.keys() - found.keys()
    extra = found.keys() - expected.keys()
    changed = [key for key in expected.keys() & found.keys() if found[key] != expected[key]]
    parts = []
    if missing:
        parts.append(f"{len(missing)} of {len(expected)} keys missing, e.g. {_some(missing)}")
    if extra:
        parts.append(f"{len(extra)} unexpected keys, e.g. {_some(extra)}")
    if changed:
        key = _some(changed)[0]
        parts.append(f"{len(changed)} keys with other state, e.g. {key!r}: found {found[key]!r}, "
                     f"expected {expected[key]!r}")
    return "; ".join(parts) or None


def assert_same_state(found: Mapping[Any, Any], expected: Mapping[Any, Any], context: str) -> None:
    """Fail with ``context`` and the difference unless every key has the expected state."""
    difference = state_difference(found, expected)
    if difference is not None:
        raise AssertionError(f"{context}: {difference}")


def assert_same_rows(found: Iterable[Any], expected: Iterable[Any], context: str) -> None:
    """Fail unless ``found`` holds exactly the rows of ``expected``, in any order."""
    found_rows, expected_rows = Counter(found), Counter(expected)
    missing, extra = expected_rows - found_rows, found_rows - expected_rows
    if missing or extra:
        raise AssertionError(f"{context}: {sum(missing.values())} of {sum(expected_rows.values())} rows missing "
                             f"(e.g. {_some(missing)}), {sum(extra.values())} unexpected (e.g. {_some(extra)})")
