"""``SnapshotUpload``: the asynchronous part of a task snapshot, as the Spark task runs it."""
from __future__ import annotations

import threading

import pytest

from statekit.checkpoint.metadata import SubtaskState
from statekit.runtime.snapshot_upload import SnapshotUpload
from statekit.spi.errors import SnapshotError
from statekit.storage.inline import InlineStreams


class _Pending:
    """A task snapshot whose write records the thread it ran on, or fails."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.written_on: threading.Thread | None = None
        self.released = False

    def write(self, streams):
        self.written_on = threading.current_thread()
        if self.error is not None:
            raise self.error
        return SubtaskState()

    def release(self) -> None:
        self.released = True


@pytest.mark.parametrize("concurrent", [True, False])
def test_result_is_the_written_state(concurrent: bool) -> None:
    pending = _Pending()
    upload = SnapshotUpload(pending, InlineStreams(), concurrent=concurrent)
    assert upload.result() == SubtaskState()
    assert (pending.written_on is not threading.current_thread()) is concurrent


@pytest.mark.parametrize("concurrent", [True, False])
def test_a_failed_write_fails_the_caller_with_its_error(concurrent: bool) -> None:
    upload = SnapshotUpload(_Pending(SnapshotError("disk full")), InlineStreams(), concurrent=concurrent)
    with pytest.raises(SnapshotError, match="disk full"):
        upload.result()


def test_abandon_releases_a_view_never_written() -> None:
    pending = _Pending()
    SnapshotUpload(pending, InlineStreams(), concurrent=False).abandon()
    assert pending.released and pending.written_on is None


def test_abandon_waits_for_a_running_upload() -> None:
    started, finish = threading.Event(), threading.Event()

    class Slow(_Pending):
        def write(self, streams):
            started.set()
            finish.wait(10)
            return super().write(streams)

    pending = Slow()
    upload = SnapshotUpload(pending, InlineStreams(), concurrent=True)
    started.wait(10)
    threading.Timer(0.2, finish.set).start()
    upload.abandon()
    assert pending.written_on is not None, "abandon() returned while the upload was still running"
