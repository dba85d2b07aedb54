"""Generation ids and ``<gen>/manifest.json``.

A generation directory ``<segments_dir>/g<N>/`` exists for readers once its
``manifest.json`` is there (written last, atomically). The manifest names the
generation, when it was published, the boundary (landed-through position per
partition), and per board its population, files, checksums and ranking style;
optionally the quarantine thresholds, the Delta table versions it was built from and
when landing started.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

MANIFEST_FILE = "manifest.json"
GENERATION_ID = re.compile(r"^g([1-9][0-9]{0,17})$")
# Keys of a board's entry in the manifest, in the order they are written.
BOARD_KEYS = (
    "population",
    "file",
    "index",
    "buckets",
    "sha256",
    "tieBreak",
    "rank",
    "hidden",
    "base",
    "basePopulation",
    "layers",
)


def generation_number(generation_id: str) -> int | None:
    """N of ``gN``; None when the id is malformed."""
    match = GENERATION_ID.match(generation_id)
    return int(match.group(1)) if match else None


def generation_id(number: int) -> str:
    if number < 1:
        raise ValueError(f"generation numbers start at 1, not {number}")
    return f"g{number}"


def rfc3339(moment: datetime) -> str:
    """UTC, millisecond precision, ``Z`` suffix: the contract's timestamp format."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}Z"
    )


def build_manifest(
    generation: str,
    published_at: datetime,
    boundary: Mapping[int, int],
    boards: Mapping[str, Mapping[str, Any]],
    quarantine: Mapping[str, Mapping[str, int]] | None = None,
    table_versions: Mapping[str, int] | None = None,
    landing_started_at: datetime | None = None,
    build: Mapping[str, Any] | None = None,
    versions: Mapping[str, str] | None = None,
    landed: Mapping[str, Any] | None = None,
    contributions: Mapping[str, Any] | None = None,
) -> str:
    """The exact text of ``manifest.json`` (also stored in the gold manifest row).

    ``versions``: board -> its ``<board>.versions.arrow`` (serving/segments.py);
    written, even empty, by every publish that keeps them, so its absence tells the
    next incremental build that the generation predates them."""
    body: dict[str, Any] = {
        "generation": generation,
        "publishedAt": rfc3339(published_at),
        "boundary": {str(p): int(boundary[p]) for p in sorted(boundary)},
        "complete": True,
        "boards": {
            board: {k: boards[board][k] for k in BOARD_KEYS if k in boards[board]}
            for board in sorted(boards)
        },
    }
    if quarantine:
        # board -> cohort -> points above which the owner transaction holds an event.
        body["quarantine"] = {b: dict(c) for b, c in sorted(quarantine.items())}
    if table_versions:
        # The Delta versions this generation was built from (time travel for
        # analysts: docs/ANALYSTS.md).
        body["tableVersions"] = {k: int(v) for k, v in sorted(table_versions.items())}
    if landing_started_at is not None:
        # Everything received before this moment is in the generation: a board that
        # closed before it is final here (see jobs/season.py).
        body["landingStartedAt"] = rfc3339(landing_started_at)
    if versions is not None:
        body["versions"] = {b: versions[b] for b in sorted(versions)}
    if landed is not None:
        # The landed records index (serving/landed.py): its chain of layers.
        body["landed"] = dict(landed)
    if contributions is not None:
        # The contributions index (serving/contributions.py): its chain of layers.
        body["contributions"] = dict(contributions)
    if build:
        # Full or incremental (and from which generation); the fingerprint says
        # whether the next publish may extend this one (jobs/incremental.py).
        body["build"] = dict(build)
    return json.dumps(body, indent=1, ensure_ascii=False) + "\n"


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The generation's manifest; None when absent, unreadable or not complete."""
    try:
        manifest = orjson.loads((directory / MANIFEST_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(manifest, dict) or not manifest.get("complete"):
        return None
    return manifest
