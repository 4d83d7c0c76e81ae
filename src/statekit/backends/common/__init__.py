"""Code any backend (ours or a plugin's) can reuse: state registration and compatibility
checks, namespace encoding, the canonical snapshot format, and the operator state backend."""
