"""Deliberately broken state backends: the negative control of the conformance suite.

Each is the heap backend with one bug, loadable by name as ``broken_backends.<module>:<Class>``
(with this directory's parent on ``PYTHONPATH``, as in Spark's workers), and
``tests/test_conformance_negative.py`` proves that the suite fails it in the expected tests.
"""
