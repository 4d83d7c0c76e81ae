"""Checkpoint storage implementations: ``jobmanager`` (driver memory) and ``filesystem`` (fsspec)."""
