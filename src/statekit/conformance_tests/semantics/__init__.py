"""Conformance level 1: state semantics of every keyed state kind (Flink's state interfaces).

A plugin subclasses ``StateSemantics`` (or the single mixins) and overrides the
``state_backend`` fixture::

    class TestMyBackendSemantics(StateSemantics):
        @pytest.fixture
        def state_backend(self):
            return MyStateBackend()

Every test works on a fresh ``keyed_backend`` that owns all key groups. The suite is shipped
in the wheel, so pytest does not rewrite its asserts: every assert carries its own message.
"""
from statekit.conformance_tests.semantics.aggregating import AggregatingStateSemantics
from statekit.conformance_tests.semantics.bulk import BulkStateSemantics
from statekit.conformance_tests.semantics.copies import MapUserKeyEquality, ValueCopySemantics
from statekit.conformance_tests.semantics.instants import InstantKeySemantics
from statekit.conformance_tests.semantics.keys import KeyIterationSemantics
from statekit.conformance_tests.semantics.list import ListStateSemantics
from statekit.conformance_tests.semantics.map import MapStateSemantics
from statekit.conformance_tests.semantics.namespaces import NamespaceEquality
from statekit.conformance_tests.semantics.reducing import ReducingStateSemantics
from statekit.conformance_tests.semantics.sizes import StateSizeSemantics
from statekit.conformance_tests.semantics.ttl import TtlSemantics
from statekit.conformance_tests.semantics.value import ValueStateSemantics


class StateSemantics(ValueStateSemantics, ListStateSemantics, MapStateSemantics,
                     ReducingStateSemantics, AggregatingStateSemantics, KeyIterationSemantics,
                     ValueCopySemantics, MapUserKeyEquality, NamespaceEquality, TtlSemantics, BulkStateSemantics,
                     InstantKeySemantics, StateSizeSemantics):
    """Every state-semantics mixin: subclass this one class and override ``state_backend``."""


__all__ = ["AggregatingStateSemantics", "BulkStateSemantics", "InstantKeySemantics", "KeyIterationSemantics",
           "ListStateSemantics", "MapStateSemantics", "MapUserKeyEquality", "NamespaceEquality",
           "ReducingStateSemantics", "StateSemantics", "StateSizeSemantics", "TtlSemantics", "ValueCopySemantics",
           "ValueStateSemantics"]
