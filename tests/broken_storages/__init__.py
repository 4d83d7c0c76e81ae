"""Deliberately broken checkpoint storages: the negative controls of the storage level
(``tests/test_conformance_negative.py``). Each differs from the ``filesystem`` storage in one
mistake a plugin author made."""
