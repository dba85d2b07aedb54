"""Repair what a crashed publish left, before the next generation is numbered.

A ``gold_manifest`` row whose ``manifest.json`` is missing gets it rewritten (from
the exact text stored in the row); a segment directory without a row (a crashed
job) or a temp directory is deleted; then retention (jobs/retention.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable

from pyspark.sql import SparkSession

from conf.settings import Settings
from jobs.retention import retain
from jobs.tables import GOLD_MANIFEST, PublishedRow, extract_published
from serving.files import TMP_PREFIX, atomic_write_text
from serving.manifest import MANIFEST_FILE


def repair_segments(
    settings: Settings, published: Iterable[PublishedRow], keep: set[str] | None = None
) -> None:
    """Finish or undo what a crashed publish left in ``segments_dir``."""
    root = settings.segments_dir
    if not root.is_dir():
        return
    rows = {r.generation: r for r in published}
    keep = keep or set()
    for entry in sorted(root.iterdir()):
        name = entry.name
        if name.startswith(TMP_PREFIX) or (name not in rows and name not in keep):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            continue
        row = rows.get(name)
        if row is not None and entry.is_dir() and not (entry / MANIFEST_FILE).exists():
            atomic_write_text(entry / MANIFEST_FILE, row.manifest_json)


def next_generation(settings: Settings, spark: SparkSession) -> tuple[str, int]:
    """Repair what a crashed publish left, apply retention, and number the next
    generation."""
    generation, number, _ = prepare_generation(settings, spark)
    return generation, number


def prepare_generation(
    settings: Settings, spark: SparkSession
) -> tuple[str, int, list[PublishedRow]]:
    """:func:`next_generation`, also returning the published generations it read:
    one publish in one process (``run_publish``) hands them to its later phases
    instead of reading ``gold_manifest`` again (two Spark jobs per read)."""
    settings.delta_dir.mkdir(parents=True, exist_ok=True)
    settings.segments_dir.mkdir(parents=True, exist_ok=True)
    published = extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
    repair_segments(settings, published)
    retain(settings, published)
    number = max((r.number for r in published), default=0) + 1
    return f"g{number}", number, published
