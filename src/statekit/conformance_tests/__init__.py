"""The conformance suite every state backend and checkpoint storage must pass.

Shipped in the wheel. Run every level against a backend by name with
``python -m statekit.conformance_tests --backend NAME [--storage NAME]`` or
``pytest --statekit-backend NAME`` (the ``plugin`` module, a ``pytest11`` entry point); the run
ends with a report per level. Or reuse it fsspec-style: subclass the mixin classes (e.g.
``StateSemantics``, ``SparkTests``) in a test module and override their fixtures
(``state_backend``; ``backend_settings`` for the Spark level). Tests that need a capability the
backend does not declare are skipped with the reason.
"""
