"""``lb publish`` as separate steps, for the Airflow DAG ``publish_generation``.

:func:`jobs.publish.run_publish` does land, recompute, publish in one call (and stays
the CLI's path); here each step is its own function, so a scheduler can run, retry and
show them one by one, passing small JSON values between them:

1. :func:`land_step`: land the partition logs (and what publish lands with them);
   returns the boundary, the landed-through position per partition;
2. :func:`recompute_step`: repair what a crashed publish left, pick the next
   generation number, recompute silver and the ranked gold snapshot for the boundary;
3. :func:`publish_step`: serving segments, the manifest row, then ``manifest.json``
   (the generation becomes visible), then retention;
4. :func:`rebase_step`: rebase the speed layer onto the generation.

Each step holds the data dir's publish lock (the one ``lb publish`` takes) while it
runs, and :func:`publish_step` refuses a generation number that something else
published meanwhile, so a CLI publish between two steps cannot corrupt a generation.
Every step is idempotent on retry: landing is idempotent per position, gold is
``replaceWhere`` per generation, the manifest row is a Delta transaction keyed by the
generation number, and a rebase at or past the generation reports ``stale``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from conf.boards import load_boards
from conf.rule_state import effective_boards, load_rule_state, namespace_seasons
from conf.rules import default_registry
from conf.settings import Settings
from jobs import publish as pub
from jobs.land import bronze_path, run_land, table_exists, transform_records
from jobs.quarantine import extract_thresholds
from jobs.rank import transform_rank
from jobs.recompute import transform_recompute
from jobs.shadow import extract_shadowed, hidden_rows, transform_public, write_hidden

LOCK_FILE = "publish.lock"


class PublishBusy(RuntimeError):
    """Another publish holds the data dir's publish lock."""


class GenerationTaken(RuntimeError):
    """The generation number was published by someone else between two steps."""


@contextmanager
def publish_lock(settings: Settings) -> Iterator[None]:
    """The lock `lb publish` holds (run/publish.lock); fails fast when taken."""
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.run_dir / LOCK_FILE, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PublishBusy("another publish is running for this data dir") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _spark(spark: SparkSession | None) -> SparkSession:
    if spark is not None:
        return spark
    from jobs.spark import get_spark

    return get_spark("publish")


def land_step(settings: Settings, spark: SparkSession | None = None) -> dict[str, int]:
    """Land every partition log and the audit stream; the boundary as JSON."""
    from jobs.audit import land_audit

    spark = _spark(spark)
    with publish_lock(settings):
        settings.delta_dir.mkdir(parents=True, exist_ok=True)
        landed = run_land(settings, spark)
        land_audit(settings, spark)
    return {str(p): int(landed.get(p, 0)) for p in range(settings.partitions)}


def recompute_step(
    settings: Settings, boundary: dict[str, int], spark: SparkSession | None = None
) -> str:
    """Silver and the gold snapshot of the next generation at ``boundary``."""
    spark = _spark(spark)
    boards = load_boards(settings.boards_file)
    delta_dir = settings.delta_dir
    with publish_lock(settings):
        delta_dir.mkdir(parents=True, exist_ok=True)
        settings.segments_dir.mkdir(parents=True, exist_ok=True)
        published = pub.extract_published(spark, delta_dir / pub.GOLD_MANIFEST)
        pub.repair_segments(settings, published)
        number = max((r.number for r in published), default=0) + 1
        generation = f"g{number}"
        bronze = bronze_path(settings)
        if table_exists(bronze):
            events = spark.read.format("delta").load(str(bronze))
        else:
            text = T.StructType([T.StructField("value", T.StringType())])
            events = transform_records(spark.createDataFrame([], text))
        positions = {int(p): int(v) for p, v in boundary.items()}
        # As run_publish: promoted rules, replay namespaces, shadowed players left out.
        rule_state = load_rule_state(settings.data_dir)
        boards = effective_boards(boards, rule_state)
        contributions, _ = transform_recompute(
            events,
            positions,
            [*boards.seasons, *namespace_seasons(boards, rule_state)],
            window_lateness_ms=boards.window_lateness_ms,
            window_rule=boards.rule,
            registry=default_registry(settings.points_min, settings.points_max),
        )
        totals = pub.load_silver(spark, contributions, delta_dir, generation)
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
        ranked = transform_rank(
            transform_public(totals, extract_shadowed(settings)), partitions
        )
        pub.load_gold_snapshot(ranked, delta_dir / pub.GOLD_SNAPSHOTS, generation)
    return generation


def publish_step(
    settings: Settings,
    generation: str,
    boundary: dict[str, int],
    spark: SparkSession | None = None,
    bucket_target: int = pub.DEFAULT_BUCKET_TARGET,
) -> str:
    """Segments, manifest row, ``manifest.json``, retention; returns the id."""
    spark = _spark(spark)
    number = pub.generation_number(generation)
    if number is None:
        raise ValueError(f"malformed generation id {generation!r}")
    manifest_path = settings.delta_dir / pub.GOLD_MANIFEST
    with publish_lock(settings):
        published = pub.extract_published(spark, manifest_path)
        if any(r.number >= number for r in published):
            raise GenerationTaken(
                f"{generation}: a generation numbered {number} or later was published "
                "since the recompute step; the next run recomputes"
            )
        table = pub.read_gold_generation(
            spark, settings.delta_dir / pub.GOLD_SNAPSHOTS, generation
        )
        target = settings.segments_dir / generation
        tmp = settings.segments_dir / f"{pub.TMP_PREFIX}{generation}-{uuid.uuid4().hex}"
        tmp.mkdir(parents=True)
        try:
            board_files = pub.write_segments(table, tmp, bucket_target)
            silver = settings.delta_dir / pub.SILVER_TOTALS
            write_hidden(
                hidden_rows(
                    spark.read.format("delta").load(str(silver)),
                    extract_shadowed(settings),
                ),
                tmp,
                board_files,
            )
            pub._fsync_dir(tmp)
            if target.exists():  # a crashed attempt's segments: never visible
                shutil.rmtree(target)
            os.rename(tmp, target)
            pub._fsync_dir(settings.segments_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        positions = {int(p): int(v) for p, v in boundary.items()}
        published_at = datetime.now(UTC)
        thresholds = extract_thresholds(
            spark.read.format("delta").load(
                str(settings.delta_dir / pub.SILVER_CONTRIBUTIONS)
            ),
            settings.quarantine_quantile,
            settings.quarantine_min_samples,
        )
        manifest_json = pub.build_manifest(
            generation, published_at, positions, board_files, thresholds
        )
        row: dict[str, Any] = {
            "generation": generation,
            "generation_number": number,
            "boundary": {str(p): v for p, v in positions.items()},
            "board_count": len(board_files),
            "populations": {b: int(v["population"]) for b, v in board_files.items()},
            "checksums": {
                name: digest
                for v in board_files.values()
                for name, digest in v["checksums"].items()
            },
            "published_at": published_at,
            "complete": True,
            "manifest_json": manifest_json,
        }
        pub.load_manifest_row(spark, manifest_path, row, number)
        pub._atomic_write_text(target / pub.MANIFEST_FILE, manifest_json)
        pub._retain(settings, pub.extract_published(spark, manifest_path))
    return generation


def rebase_step(settings: Settings, generation: str) -> dict[str, str]:
    """Rebase every partition onto ``generation``; outcome per partition."""
    from speed.rebase import rebase_published

    report = rebase_published(settings, generation)
    return {str(p): outcome for p, outcome in report.partitions.items()}
