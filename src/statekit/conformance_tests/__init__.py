"""The conformance suite every state backend and checkpoint storage must pass.

Shipped in the wheel. A plugin reuses it fsspec-style: subclass the mixin classes (e.g.
``ValueStateSemantics``) in a test module and override the ``state_backend`` fixture to return
the plugin's ``StateBackend``. Tests that need a capability the backend does not declare are
skipped with the reason.
"""
