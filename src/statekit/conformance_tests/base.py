"""Fixtures and helpers shared by the conformance mixins.

A plugin overrides exactly one fixture, ``state_backend``, returning its configured
``StateBackend``. Everything else is built from it.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Iterator, Sequence

import pytest

from statekit.serializers import DEFAULT_SERIALIZER
from statekit.spi import (
    Capabilities, KeyedBackendParams, KeyedStateBackend, KeyedStateHandle, StateBackend, SubtaskInfo, TypeSerializer,
    key_group_for_key,
)
from statekit.spi.key_format import restored_key_serializer
from statekit.spi.serializer import trusting
from statekit.spi.storage import CheckpointStreams

MAX_PARALLELISM = 128


#: what a backend may declare it lacks; everything else the suite tests is required behaviour
OPTIONAL_CAPABILITIES = tuple(f.name for f in fields(Capabilities))


def declared_capabilities(state_backend: StateBackend | type[StateBackend]) -> dict[str, bool]:
    """The optional capabilities a backend (or backend class) declares, by name, read from the
    fields statekit's runtime reads (not from an overridable ``declared()``). Fields a plugin adds
    to its own ``Capabilities`` subclass are not capabilities: they are left out."""
    capabilities = state_backend.capabilities
    if not isinstance(capabilities, Capabilities):
        raise AssertionError(f"{_name(state_backend)}.capabilities must be a statekit.spi.Capabilities, "
                             f"not {type(capabilities).__name__}")
    return {name: bool(getattr(capabilities, name)) for name in OPTIONAL_CAPABILITIES}


def requires(state_backend: StateBackend, capability: str) -> None:
    """Skip the calling test unless the backend declares the optional ``capability``. Any other
    name is an error: required behaviour cannot be declared away."""
    if capability not in OPTIONAL_CAPABILITIES:
        raise AssertionError(f"{capability!r} is not an optional capability ({', '.join(OPTIONAL_CAPABILITIES)}): "
                             f"required behaviour cannot be skipped")
    if not declared_capabilities(state_backend)[capability]:
        pytest.skip(f"{_name(state_backend)} does not declare capability {capability!r}")


def _name(state_backend: StateBackend | type[StateBackend]) -> str:
    cls = state_backend if isinstance(state_backend, type) else type(state_backend)
    return cls.__name__


def open_keyed_backend(state_backend: StateBackend, local_dir: str, *, subtask_index: int = 0,
                       parallelism: int = 1, max_parallelism: int = MAX_PARALLELISM,
                       restore_handles: Sequence[KeyedStateHandle] = (),
                       restore_streams: CheckpointStreams | None = None,
                       job_id: str = "conformance-job", operator_id: str = "op",
                       working_dir: str | None = None, resume_local_state: bool = False,
                       key_serializer: TypeSerializer | None = None) -> KeyedStateBackend:
    """A keyed backend of ``state_backend`` for one subtask (keys written by ``key_serializer``, else
    as the restored state wrote them, else by the default serializer, as a job's are)."""
    subtask = SubtaskInfo(job_id, operator_id, subtask_index, parallelism, max_parallelism)
    with trusting(state_backend.native_snapshots_run_code):  # as a job that writes that native format
        key_serializer = key_serializer or restored_key_serializer(restore_handles) or DEFAULT_SERIALIZER
        return state_backend.create_keyed_backend(KeyedBackendParams(
            subtask=subtask, key_serializer=key_serializer, restore_handles=tuple(restore_handles),
            restore_streams=restore_streams, local_dir=local_dir, working_dir=working_dir,
            resume_local_state=resume_local_state))


def set_key(backend: KeyedStateBackend, key: Any) -> None:
    """Make ``key`` current, computing its key group exactly as the engines do."""
    backend.set_current_key(key, key_group_for_key(key, backend.max_parallelism))


class BackendTestBase:
    """Base of every backend mixin: override ``state_backend`` in the subclass."""

    @pytest.fixture
    def state_backend(self) -> StateBackend:
        raise NotImplementedError("override the `state_backend` fixture to return your StateBackend")

    @pytest.fixture
    def keyed_backend(self, state_backend: StateBackend, tmp_path: Any) -> Iterator[KeyedStateBackend]:
        """A backend owning every key group (subtask 0 of 1)."""
        backend = open_keyed_backend(state_backend, str(tmp_path / "keyed"))
        yield backend
        backend.dispose()
