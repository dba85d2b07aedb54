"""Publish one generation: land, recompute, rank, write gold + serving segments.

Order of effects (a generation is visible to the API only through its
``manifest.json``, so a crash at any step leaves no visible partial generation):

1. repair: a ``gold_manifest`` row whose ``manifest.json`` is missing gets it
   rewritten (from the exact text stored in the row); a segment directory without a
   row (a crashed job) is deleted; then retention (jobs/repair.py,
   jobs/retention.py);
2. land every partition; the boundary is the landed-through position per partition;
3. recompute contributions and totals from bronze up to the boundary (silver);
4. rank; write ``gold_snapshots`` for the generation, or with layering on an
   incremental generation's changed rows to ``gold_changes`` (jobs/tables.py)
   (``replaceWhere``, so a retry of a crashed generation number replaces its rows)
   (3 and 4: jobs/build.py, in full or incrementally, jobs/incremental.py);
5. write the segment files into a temp directory and rename it to ``<gen>/``;
6. append the ``gold_manifest`` row (idempotent: ``txnAppId=publish``,
   ``txnVersion`` = generation number);
7. LAST, write ``<gen>/manifest.json`` atomically (tmp + ``os.replace``) (5 to 7:
   jobs/segments.py).

The segment and manifest format (files, ids, ``manifest.json``) is
:mod:`serving`'s.

The same bronze and boundary give byte-identical segment files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from conf.boards import BoardsConfig, load_boards
from conf.settings import Settings
from jobs.audit import land_audit
from jobs.build import recompute_generation
from jobs.land import bronze_path, extract_landed_through, run_land
from jobs.phase_clock import PhaseClock
from jobs.repair import prepare_generation
from jobs.segments import DEFAULT_BUCKET_TARGET, JOB_UMASK, publish_segments
from speed.server import resolve_redis_url


def run_publish(
    settings: Settings,
    *,
    spark: SparkSession | None = None,
    boards: BoardsConfig | None = None,
    bucket_target: int = DEFAULT_BUCKET_TARGET,
    fail_before_manifest: bool = False,
    fail_at: str | None = None,
    after_land_commit: Callable[[int], None] | None = None,
    land: bool = True,
    timings: dict[str, float] | None = None,
    full: bool = False,
    landed: LandedInputs | None = None,
    compact: bool = False,
) -> str:
    """Land, recompute, rank and publish the next generation; returns its id.

    Incremental when the previous generation is a valid base (jobs/incremental.py);
    ``full`` forces a full recompute. ``compact``: every board of the new
    generation is a full base, layered ones compacted from their chains
    (jobs/segments.py ``publish_segments``).

    ``fail_before_manifest`` / ``fail_at`` are test hooks that raise
    :class:`PublishAborted` at a step: ``"before_manifest_row"`` (segments in place,
    no manifest row; same as ``fail_before_manifest``) or ``"before_manifest_json"``
    (row committed, ``manifest.json`` missing).

    ``land=False`` skips landing (bronze is taken as landed, e.g. by a benchmark);
    the boundary is then Delta's landed-through position per partition.
    ``landed``: phase 1 already ran (:func:`land_inputs`, e.g. the season close,
    which checks what it landed before publishing); the publish uses it and does
    not land again.
    ``timings``, when given, receives the wall-clock seconds of each phase.
    """
    clock = PhaseClock(timings)
    # Segment files and directories: owner rw, group r (Delta's follow Spark's
    # fs.permissions.umask-mode, set in jobs.spark).
    previous_umask = os.umask(JOB_UMASK)
    try:
        return _run_publish(
            settings,
            clock,
            spark=spark,
            boards=boards,
            bucket_target=bucket_target,
            fail_before_manifest=fail_before_manifest,
            fail_at=fail_at,
            after_land_commit=after_land_commit,
            land=land,
            full=full,
            landed=landed,
            compact=compact,
        )
    finally:
        os.umask(previous_umask)


@dataclass(frozen=True, slots=True)
class LandedInputs:
    """What the land phase hands to the next: the boundary (landed-through position
    per partition) and when landing started (None when nothing was landed)."""

    boundary: dict[int, int]
    landing_started_at: datetime | None


def land_inputs(
    settings: Settings,
    spark: SparkSession,
    *,
    land: bool = True,
    after_land_commit: Callable[[int], None] | None = None,
) -> LandedInputs:
    """Phase 1: land the partition logs and what publish lands with them."""
    landing_started_at = datetime.now(UTC) if land else None
    if land:
        landed = run_land(settings, spark, after_commit=after_land_commit)
        # Admin actions recorded in Redis since the last publish reach Delta too.
        land_audit(settings, spark)
        # Award versions the API wrote (it has no Spark) reach Delta gold_awards.
        from jobs.season import land_awards

        land_awards(settings, spark)
    else:
        landed = extract_landed_through(spark, bronze_path(settings))
    boundary = {p: landed.get(p, 0) for p in range(settings.partitions)}
    return LandedInputs(boundary, landing_started_at)


def _run_publish(
    settings: Settings,
    clock: PhaseClock,
    *,
    spark: SparkSession | None,
    boards: BoardsConfig | None,
    bucket_target: int,
    fail_before_manifest: bool,
    fail_at: str | None,
    after_land_commit: Callable[[int], None] | None,
    land: bool,
    full: bool = False,
    landed: LandedInputs | None = None,
    compact: bool = False,
) -> str:
    if land:
        # Which Redis to land from is settled before Spark starts: never a default.
        resolve_redis_url(settings)
    if fail_before_manifest:
        fail_at = "before_manifest_row"
    if spark is None:
        from jobs.spark import get_spark

        spark = get_spark("publish")
    if boards is None:
        boards = load_boards(settings.boards_file)
    # The phases are also separate Airflow tasks (jobs/publish_steps.py).
    generation, number, published = prepare_generation(settings, spark)
    clock.lap("repair")
    if landed is None:
        landed = land_inputs(
            settings, spark, land=land, after_land_commit=after_land_commit
        )
    inputs = landed
    build = recompute_generation(
        settings,
        spark,
        boards,
        generation,
        inputs.boundary,
        clock,
        read_flags=land,
        full=full,
        bucket_target=bucket_target,
        published=published,
    )
    return publish_segments(
        settings,
        spark,
        boards,
        generation,
        number,
        inputs,
        bucket_target=bucket_target,
        fail_at=fail_at,
        clock=clock,
        build=build,
        compact=compact,
        published=published,
    )


def main() -> None:
    from conf.settings import get_settings

    print(run_publish(get_settings()))


if __name__ == "__main__":
    main()
