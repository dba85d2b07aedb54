"""Compatibility shim: the generation writer lives in ``tests/support/segments.py``."""

from tests.support.segments import equi_depth, write_generation

__all__ = ["equi_depth", "write_generation"]
