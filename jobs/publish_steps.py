"""``lb publish`` as separate steps, for the Airflow DAG ``publish_generation``.

:func:`jobs.publish.run_publish` runs its three phases (``land_inputs``,
``recompute_generation``, ``publish_segments``) in one call; here each phase is its own
step, so a scheduler can run, retry and show them one by one, passing small JSON values
between them:

1. :func:`land_step`: land the partition logs (and what publish lands with them);
   returns the boundary (landed-through position per partition) and when landing
   started (what makes a generation final for boards closed before it);
2. :func:`recompute_step`: repair what a crashed publish left, pick the next
   generation number, recompute silver and the ranked gold snapshot for the boundary;
3. :func:`publish_step`: serving segments, the manifest row, then ``manifest.json``
   (the generation becomes visible), then retention;
4. :func:`rebase_step`: rebase the speed layer onto the generation.

Each step holds the data dir's publish lock (:mod:`jobs.publish_lock`, the one ``lb
publish`` takes) while it runs, and :func:`publish_step` refuses a generation number
that something else published meanwhile, so a CLI publish between two steps cannot
corrupt a generation.
Every step is idempotent on retry: landing is idempotent per position, gold is
``replaceWhere`` per generation, the manifest row is a Delta transaction keyed by the
generation number, and a rebase at or past the generation reports ``stale``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from conf.boards import load_boards
from conf.settings import Settings
from jobs.build import recompute_generation
from jobs.publish import LandedInputs, land_inputs
from jobs.publish_lock import publish_lock
from jobs.repair import next_generation
from jobs.segments import DEFAULT_BUCKET_TARGET, JOB_UMASK, publish_segments
from jobs.tables import GOLD_MANIFEST, extract_published
from serving.manifest import generation_number
from speed.server import resolve_redis_url


class GenerationTaken(RuntimeError):
    """The generation number was published by someone else between two steps."""


def _spark(spark: SparkSession | None) -> SparkSession:
    if spark is not None:
        return spark
    from jobs.spark import get_spark

    return get_spark("publish")


@contextmanager
def _job_umask() -> Iterator[None]:
    """The umask run_publish applies to segment files (jobs/segments.py)."""
    previous = os.umask(JOB_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def _inputs(landed: dict[str, Any]) -> LandedInputs:
    started = landed.get("landingStartedAt")
    return LandedInputs(
        {int(p): int(v) for p, v in landed["boundary"].items()},
        datetime.fromisoformat(started) if started else None,
    )


def land_step(settings: Settings, spark: SparkSession | None = None) -> dict[str, Any]:
    """Phase 1 of run_publish: land; returns the boundary and when landing started
    (JSON: an XCom)."""
    resolve_redis_url(settings)
    spark = _spark(spark)
    with publish_lock(settings), _job_umask():
        settings.delta_dir.mkdir(parents=True, exist_ok=True)
        inputs = land_inputs(settings, spark)
    started = inputs.landing_started_at
    return {
        "boundary": {str(p): int(v) for p, v in inputs.boundary.items()},
        "landingStartedAt": started.isoformat() if started else None,
    }


def recompute_step(
    settings: Settings, landed: dict[str, Any], spark: SparkSession | None = None
) -> str:
    """Phase 2: number the next generation, recompute silver and its gold snapshot."""
    spark = _spark(spark)
    boards = load_boards(settings.boards_file)
    with publish_lock(settings), _job_umask():
        generation, _ = next_generation(settings, spark)
        recompute_generation(
            settings, spark, boards, generation, _inputs(landed).boundary
        )
    return generation


def publish_step(
    settings: Settings,
    generation: str,
    landed: dict[str, Any],
    spark: SparkSession | None = None,
    bucket_target: int = DEFAULT_BUCKET_TARGET,
    compact: bool = False,
) -> str:
    """Phase 3: segments, manifest row, ``manifest.json``, retention; ``compact``:
    every board a full base (the compact_generation DAG, ``lb publish --compact``)."""
    spark = _spark(spark)
    number = generation_number(generation)
    if number is None:
        raise ValueError(f"malformed generation id {generation!r}")
    boards = load_boards(settings.boards_file)
    with publish_lock(settings), _job_umask():
        published = extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
        if any(r.number >= number for r in published):
            raise GenerationTaken(
                f"{generation}: a generation numbered {number} or later was published "
                "since the recompute step; the next run recomputes"
            )
        return publish_segments(
            settings,
            spark,
            boards,
            generation,
            number,
            _inputs(landed),
            bucket_target=bucket_target,
            compact=compact,
        )


def rebase_step(settings: Settings, generation: str) -> dict[str, str]:
    """Rebase every partition onto ``generation``; outcome per partition."""
    from speed.rebase import rebase_published

    report = rebase_published(settings, generation)
    return {str(p): outcome for p, outcome in report.partitions.items()}
