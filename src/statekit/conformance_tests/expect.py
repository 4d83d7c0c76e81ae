"""``expect_error``: ``pytest.raises`` that says what the plugin did wrong when nothing is raised
(pytest's own message, "DID NOT RAISE", names neither the operation nor the rule it broke)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Generic, Iterator, TypeVar

E = TypeVar("E", bound=BaseException)


class Caught(Generic[E]):
    """The exception an ``expect_error`` block raised (``.value``), as ``pytest.ExceptionInfo``."""

    value: E


@contextmanager
def expect_error(error: type[E], operation: str) -> Iterator[Caught[E]]:
    """Expect ``error`` from the block; ``operation`` says what the block did and what the rule
    is, e.g. ``"reading a stream with a flipped byte must fail its checksum"``. Other exceptions
    propagate unchanged (the test fails with them)."""
    caught: Caught[E] = Caught()
    try:
        yield caught
    except error as exc:
        caught.value = exc
        return
    raise AssertionError(f"{operation}, but it raised no {error.__name__}")
