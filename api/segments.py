"""Compatibility names: the serving format lives in :mod:`serving` now (issue 13).

Kept so code written against ``api.segments`` keeps importing; new code imports
``serving.segments`` / ``serving.registry`` directly.
"""

from __future__ import annotations

from serving.manifest import GENERATION_ID, generation_number
from serving.registry import (
    REFRESH_SECONDS,
    Generation,
    GenerationExpiredError,
    GenerationNotFoundError,
    GenerationRegistry,
    quarantine_thresholds,
)
from serving.segments import BoardSegment

__all__ = [
    "GENERATION_ID",
    "REFRESH_SECONDS",
    "BoardSegment",
    "Generation",
    "GenerationExpiredError",
    "GenerationNotFoundError",
    "GenerationRegistry",
    "generation_number",
    "quarantine_thresholds",
]
