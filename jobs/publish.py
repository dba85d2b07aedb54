"""Publish one generation: land, recompute, rank, write gold + serving segments.

Order of effects (a generation is visible to the API only through its
``manifest.json``, so a crash at any step leaves no visible partial generation):

1. repair: a ``gold_manifest`` row whose ``manifest.json`` is missing gets it
   rewritten (from the exact text stored in the row); a segment directory without a
   row (a crashed job) is deleted; then retention;
2. land every partition; the boundary is the landed-through position per partition;
3. recompute contributions and totals from bronze up to the boundary (silver);
4. rank; write ``gold_snapshots`` for the generation (``replaceWhere``, so a retry of
   a crashed generation number replaces its rows);
5. write the segment files into a temp directory and rename it to ``<gen>/``;
6. append the ``gold_manifest`` row (idempotent: ``txnAppId=publish``,
   ``txnVersion`` = generation number);
7. LAST, write ``<gen>/manifest.json`` atomically (tmp + ``os.replace``).

The segment and manifest format (files, ids, ``manifest.json``) is
:mod:`serving`'s.

The same bronze and boundary give byte-identical segment files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import BoardsConfig, Season, load_boards
from conf.rule_state import effective_boards, load_rule_state, namespace_seasons
from conf.rules import RuleRegistry, default_registry
from conf.settings import Settings
from jobs.audit import land_audit
from jobs.incremental import (
    CONTRIBUTION_KEYS,
    MODE_FULL,
    MODE_INCREMENTAL,
    TOTAL_KEYS,
    Build,
    Previous,
    build_path,
    enable_deletion_vectors,
    fingerprint,
    hidden_players,
    key_condition,
    link_board,
    load_replace,
    previous_state,
    transform_touched_history,
)
from jobs.incremental_pairs import (
    ON_SCOPE,
    PAIR,
    timed_players,
    transform_earlier_pairs,
    transform_in_scope,
    transform_pair_sources,
    transform_scope_boards,
    transform_scope_totals,
    transform_sum_totals,
    transform_touched_pairs,
)
from jobs.land import (
    BRONZE,
    bronze_path,
    extract_landed_through,
    run_land,
    table_exists,
    transform_records,
)
from jobs.phase_clock import PhaseClock
from jobs.quarantine import extract_thresholds
from jobs.rank import transform_rank
from jobs.recompute import (
    NARROW,
    transform_achieved,
    transform_between_boundaries,
    transform_recompute,
    transform_totals,
    transform_within_boundary,
    with_record_columns,
)
from jobs.segment_tasks import write_segments_distributed
from jobs.shadow import extract_shadowed, hidden_from, transform_public
from jobs.table_versions import table_versions
from jobs.versions import named_versions, transform_versions
from serving.files import TMP_PREFIX, atomic_write_text, fsync_dir

# The format is serving's; the re-exported names are the ones callers know from here.
from serving.manifest import MANIFEST_FILE, build_manifest
from serving.manifest import generation_number as generation_number
from serving.manifest import rfc3339 as rfc3339
from serving.segments import equi_depth_buckets as equi_depth_buckets
from serving.segments import write_board_segment as write_board_segment
from serving.segments import write_hidden
from speed.server import resolve_redis_url

SILVER_CONTRIBUTIONS = "silver_contributions"
SILVER_TOTALS = "silver_totals"
GOLD_SNAPSHOTS = "gold_snapshots"
GOLD_MANIFEST = "gold_manifest"
DEFAULT_BUCKET_TARGET = 100
JOB_UMASK = 0o027
log = logging.getLogger(__name__)

GOLD_COLUMNS = ["board", "position", "rank", "player_id", "score", "achieved_ms"]

MANIFEST_SCHEMA = T.StructType(
    [
        T.StructField("generation", T.StringType(), False),
        T.StructField("generation_number", T.LongType(), False),
        T.StructField("boundary", T.MapType(T.StringType(), T.LongType()), False),
        T.StructField("board_count", T.LongType(), False),
        T.StructField("populations", T.MapType(T.StringType(), T.LongType()), False),
        T.StructField("checksums", T.MapType(T.StringType(), T.StringType()), False),
        T.StructField("published_at", T.TimestampType(), False),
        T.StructField("complete", T.BooleanType(), False),
        T.StructField("manifest_json", T.StringType(), False),
    ]
)


class PublishAborted(RuntimeError):
    """Raised by the test hooks that simulate a crash mid-publish."""


@dataclass(frozen=True, slots=True)
class PublishedRow:
    generation: str
    number: int
    manifest_json: str


# --------------------------------------------------------------------------- helpers


# A generation that left the newest K stays on disk this long: an API process maps
# the newest K as of its last scan (a few seconds old), so a page or pinned read it
# is serving from that generation finishes on files that still exist.
RETENTION_GRACE_SECONDS = 600


class RetentionUnsafe(RuntimeError):
    """What the speed layer stands on cannot be read: retention deletes nothing."""


def base_generations(settings: Settings) -> set[str]:
    """The base generation of every partition of the speed layer (``lb:{pN}:base``).

    :raises RetentionUnsafe: when Redis cannot be read.
    """
    import redis

    from speed.connection import sync_client
    from speed.partitions import Keys
    from speed.server import resolve_redis_url

    try:
        client = sync_client(resolve_redis_url(settings), socket_timeout=10)
        try:
            pipe = client.pipeline(transaction=False)
            for partition in range(settings.partitions):
                pipe.hget(Keys(partition).base_generation, "g")
            numbers = pipe.execute()
        finally:
            client.close()
    except (redis.RedisError, OSError, RuntimeError) as exc:
        raise RetentionUnsafe(f"cannot read the partitions' bases: {exc}") from exc
    return {f"g{int(n)}" for n in numbers if n is not None and int(n) > 0}


def protected_generations(settings: Settings) -> set[str]:
    """Generations retention must keep whatever their age.

    * every partition's base generation: live reads merge the speed layer's changes
      with exactly that generation, so removing it before the rebase onto a newer
      one would degrade every live read (issue 7, item 4);
    * award snapshots: the generations they were taken from
      (``serving.awards.award_generations``), kept forever.

    Pinned cursors are covered by :func:`apply_retention` itself: a cursor is honoured
    while its generation is one of the newest ``retained_generations`` (API.md), plus
    ``RETENTION_GRACE_SECONDS``.

    :raises RetentionUnsafe: when the bases cannot be read (then nothing is deleted).
    """
    from serving.awards import award_generations

    return base_generations(settings) | award_generations(settings.data_dir)


def _local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


def read_gold_generation(
    spark: SparkSession,
    path: Path,
    generation: str,
    boards: Iterable[str] | None = None,
) -> pa.Table:
    """The committed gold rows of one generation, read from Delta's active files
    (only ``boards``' rows when given)."""
    columns = ["board", "position", "player_id", "score", "achieved_ms"]
    wanted = None if boards is None else sorted(boards)
    files = (
        spark.read.format("delta")
        .load(str(path))
        .where(F.col("generation") == generation)
        .inputFiles()
        if wanted is None or wanted
        else []
    )
    filters = None if wanted is None else [("board", "in", wanted)]
    tables = [
        pq.read_table(_local_path(f), columns=columns, filters=filters)
        for f in sorted(files)
    ]
    if not tables:
        numeric = ("position", "score", "achieved_ms")
        return pa.table(
            {
                c: pa.array([], pa.int64() if c in numeric else pa.string())
                for c in columns
            }
        )
    table = pa.concat_tables(tables)
    order = pc.sort_indices(
        table, sort_keys=[("board", "ascending"), ("position", "ascending")]
    )
    return table.take(order)


# ------------------------------------------------------------------ manifest & repair


def extract_published(spark: SparkSession, path: Path) -> list[PublishedRow]:
    if not table_exists(path):
        return []
    rows = (
        spark.read.format("delta")
        .load(str(path))
        .where(F.col("complete"))
        .select("generation", "generation_number", "manifest_json")
        .collect()
    )
    return sorted(
        (PublishedRow(r[0], int(r[1]), r[2]) for r in rows), key=lambda r: r.number
    )


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


def _published_at(row: PublishedRow) -> float:
    try:
        text = json.loads(row.manifest_json)["publishedAt"]
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, KeyError, TypeError):
        return time.time()  # unknown: treat as just published (keeps it longer)


def apply_retention(
    settings: Settings,
    published: Iterable[PublishedRow],
    protected: set[str],
    now: float | None = None,
) -> list[str]:
    """Delete segment dirs older than the newest ``retained_generations``, except the
    ``protected`` ones and those that left the newest K less than
    ``RETENTION_GRACE_SECONDS`` ago (when the K-th newer generation was published)."""
    rows = sorted(published, key=lambda r: r.number)
    numbers = [(r.number, r.generation) for r in rows]
    retained = settings.retained_generations
    keep = {g for _, g in numbers[-retained:]} | protected
    now = time.time() if now is None else now
    for i, row in enumerate(rows):
        pushed_out_by = i + retained
        if pushed_out_by < len(rows) and (
            now - _published_at(rows[pushed_out_by]) < RETENTION_GRACE_SECONDS
        ):
            keep.add(row.generation)
    deleted = []
    for _, generation in numbers:
        directory = settings.segments_dir / generation
        if generation not in keep and directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
            deleted.append(generation)
    return deleted


def load_manifest_row(
    spark: SparkSession, path: Path, row: dict[str, Any], number: int
) -> None:
    df = spark.createDataFrame([row], MANIFEST_SCHEMA)
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", "publish")
        .option("txnVersion", number)
        .save(str(path))
    )


def _retain(settings: Settings, published: list[PublishedRow]) -> list[str]:
    try:
        protected = protected_generations(settings)
    except RetentionUnsafe as exc:
        log.warning("retention skipped: %s", exc)
        return []
    return apply_retention(settings, published, protected)


# ------------------------------------------------------------------------- the job


def with_achieved(totals: DataFrame, achieved: DataFrame | None) -> DataFrame:
    """Totals with ``achieved_ms`` (null off ``first_achieved`` boards): silver keeps
    it, so an incremental build re-ranks untouched players without their history."""
    if achieved is None:
        return totals.withColumn("achieved_ms", F.lit(None).cast("bigint"))
    return totals.join(achieved, ["board", "player_id"], "left").withColumn(
        "achieved_ms", F.col("achieved_ms").cast("bigint")
    )


def load_silver(
    spark: SparkSession,
    contributions: DataFrame,
    delta_dir: Path,
    generation: str,
    clock: PhaseClock | None = None,
    achieved: DataFrame | None = None,
) -> DataFrame:
    """Write silver contributions, then totals computed from the written table.

    Silver holds the latest recompute (overwritten by a full build, merged by an
    incremental one; a row carries the generation that last wrote it). Totals read
    the committed contributions back instead of recomputing them, so the recompute
    runs once. Returns the committed totals.
    """
    (
        contributions.withColumn("generation", F.lit(generation))
        .write.format("delta")
        .mode("overwrite")
        # Extend the schema in place (a new column), never replace it: the column
        # comments and table properties (jobs/hygiene.py) stay.
        .option("mergeSchema", "true")
        .partitionBy("partition")
        .save(str(delta_dir / SILVER_CONTRIBUTIONS))
    )
    enable_deletion_vectors(spark, delta_dir / SILVER_CONTRIBUTIONS)
    if clock is not None:
        clock.lap("recompute_contributions")
    written = spark.read.format("delta").load(str(delta_dir / SILVER_CONTRIBUTIONS))
    (
        with_achieved(transform_totals(written.drop("generation")), achieved)
        .withColumn("generation", F.lit(generation))
        .write.format("delta")
        .mode("overwrite")
        # Extend the schema in place (a new column), never replace it: the column
        # comments and table properties (jobs/hygiene.py) stay.
        .option("mergeSchema", "true")
        .save(str(delta_dir / SILVER_TOTALS))
    )
    enable_deletion_vectors(spark, delta_dir / SILVER_TOTALS)
    if clock is not None:
        clock.lap("totals")
    return spark.read.format("delta").load(str(delta_dir / SILVER_TOTALS))


def load_gold_snapshot(ranked: DataFrame, path: Path, generation: str) -> None:
    (
        ranked.withColumn("generation", F.lit(generation))
        .select(
            "board",
            "generation",
            "position",
            "rank",
            "player_id",
            "score",
            (F.col("achieved_ms") if "achieved_ms" in ranked.columns else F.lit(None))
            .cast("bigint")
            .alias("achieved_ms"),
        )
        .write.format("delta")
        .mode("overwrite")
        # achieved_ms joined the table with first_achieved; older tables gain it.
        .option("mergeSchema", "true")
        .partitionBy("generation")
        .option("replaceWhere", f"generation = '{generation}'")
        .save(str(path))
    )


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
) -> str:
    """Land, recompute, rank and publish the next generation; returns its id.

    Incremental when the previous generation is a valid base (jobs/incremental.py);
    ``full`` forces a full recompute.

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
        )
    finally:
        os.umask(previous_umask)


def board_orders(boards: BoardsConfig) -> dict[str, tuple[bool, bool]]:
    """Season boards ranked other than by (score, player id): board ->
    (first_achieved tie-break, unique ranks)."""
    return {
        f"season:{s.id}:{scope}": (s.tie_break == "first_achieved", s.rank == "unique")
        for s in boards.seasons
        for scope in boards.scopes
        if s.tie_break == "first_achieved" or s.rank == "unique"
    }


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


def next_generation(settings: Settings, spark: SparkSession) -> tuple[str, int]:
    """Repair what a crashed publish left, apply retention, and number the next
    generation."""
    settings.delta_dir.mkdir(parents=True, exist_ok=True)
    settings.segments_dir.mkdir(parents=True, exist_ok=True)
    published = extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
    repair_segments(settings, published)
    _retain(settings, published)
    number = max((r.number for r in published), default=0) + 1
    return f"g{number}", number


def recompute_generation(
    settings: Settings,
    spark: SparkSession,
    boards: BoardsConfig,
    generation: str,
    boundary: Mapping[int, int],
    clock: PhaseClock | None = None,
    read_flags: bool = True,
    *,
    full: bool = False,
    bucket_target: int = DEFAULT_BUCKET_TARGET,
) -> Build:
    """Phase 2: silver (contributions, totals) and the ranked gold snapshot of
    ``generation`` from bronze up to ``boundary``.

    Promoted rules apply to their seasons, registered replays add their namespace
    boards (conf/rule_state.py), and shadowed players stay out of gold (read from
    the speed layer's flags unless ``read_flags`` is false).

    Incremental (jobs/incremental.py) when the previous generation is a valid base
    and ``full`` is false; the returned :class:`Build` says which, and is also saved
    for :func:`publish_segments` (a separate Airflow task)."""
    delta_dir = settings.delta_dir
    bronze = bronze_path(settings)
    if table_exists(bronze):
        events = spark.read.format("delta").load(str(bronze))
    else:
        # Nothing landed yet: an empty bronze frame publishes an empty generation.
        text = T.StructType([T.StructField("value", T.StringType())])
        events = transform_records(spark.createDataFrame([], text))
    rule_state = load_rule_state(settings.data_dir)
    boards = effective_boards(boards, rule_state)
    seasons = [*boards.seasons, *namespace_seasons(boards, rule_state)]
    points = (settings.points_min, settings.points_max)
    quarantine = (settings.quarantine_quantile, settings.quarantine_min_samples)
    fp = fingerprint(boards, seasons, points, bucket_target, quarantine)
    shadowed = extract_shadowed(settings) if read_flags else set()
    previous: Previous | None = None
    if not full:
        published = extract_published(spark, delta_dir / GOLD_MANIFEST)
        last = published[-1] if published else None
        previous, why = previous_state(
            settings,
            last.manifest_json if last else None,
            last.generation if last else None,
            fp,
            boundary,
            (SILVER_CONTRIBUTIONS, SILVER_TOTALS),
        )
        if previous is None:
            log.info("%s: full build (%s)", generation, why)
    recompute = RecomputeInputs(
        events=with_record_columns(events),
        boundary=boundary,
        seasons=seasons,
        boards=boards,
        registry=default_registry(*points),
        shadowed=shadowed,
        partitions=int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
    )
    if previous is None:
        _recompute_full(spark, delta_dir, generation, recompute, clock)
        build = Build(MODE_FULL, fp)
    else:
        build = _recompute_incremental(
            spark, delta_dir, generation, recompute, previous, clock
        )
        build.fingerprint = fp
    build.save(build_path(settings, generation))
    return build


@dataclass(frozen=True, slots=True)
class RecomputeInputs:
    """What both builds recompute from (bronze with every record column)."""

    events: DataFrame
    boundary: Mapping[int, int]
    seasons: list[Season]
    boards: BoardsConfig
    registry: RuleRegistry
    shadowed: set[str]
    partitions: int

    def contributions(self, events: DataFrame) -> DataFrame:
        """Silver contribution rows of ``events`` up to the boundary."""
        contributions, _ = transform_recompute(
            events,
            self.boundary,
            self.seasons,
            window_lateness_ms=self.boards.window_lateness_ms,
            window_rule=self.boards.rule,
            registry=self.registry,
        )
        return contributions

    def silver(self, events: DataFrame) -> tuple[DataFrame, DataFrame | None]:
        """(contributions, first-achieved times) of ``events`` up to the boundary."""
        contributions = self.contributions(events)
        achieved = transform_achieved(
            events, self.boundary, self.boards.seasons, self.boards.window_lateness_ms
        )
        return contributions, achieved

    def rank(self, totals: DataFrame) -> DataFrame:
        unique = [b for b, (_, u) in board_orders(self.boards).items() if u]
        return transform_rank(
            transform_public(totals, self.shadowed), self.partitions, unique
        )


def _recompute_full(
    spark: SparkSession,
    delta_dir: Path,
    generation: str,
    inputs: RecomputeInputs,
    clock: PhaseClock | None,
) -> None:
    contributions, achieved = inputs.silver(inputs.events)
    if clock is not None:
        clock.lap("land")
    totals_now = load_silver(
        spark, contributions, delta_dir, generation, clock, achieved
    )
    load_gold_snapshot(inputs.rank(totals_now), delta_dir / GOLD_SNAPSHOTS, generation)
    if clock is not None:
        clock.lap("rank_gold")


def _recompute_incremental(
    spark: SparkSession,
    delta_dir: Path,
    generation: str,
    inputs: RecomputeInputs,
    previous: Previous,
    clock: PhaseClock | None,
) -> Build:
    """Silver and gold of ``generation`` from ``previous`` plus the log's delta.

    Only rows that can have changed are re-derived and merged: a contribution is a
    function of its (player, match)'s records and of the records sharing a
    (player, eventId) with them (a player's records share one partition, so the
    delta never reorders earlier ones), so only the pairs with a record in the delta
    change, plus the match of a held record a ``released`` record in the delta lets
    count (jobs/incremental_pairs.py). A total is a function of the player's
    contributions on that board, so only the (board, player) keys of those pairs'
    old and new rows change; they are aggregated from the other pairs' silver rows
    plus the re-derived ones. The boards of those keys (and of players whose
    shadow flag flipped) are re-ranked. Only the first-achieved replay reads whole
    histories, of the touched players on ``first_achieved`` boards."""
    delta = transform_between_boundaries(
        inputs.events, previous.boundary, inputs.boundary
    )
    delta_keys = delta.select("player_id", "match_id", "event_id", "status")
    delta_keys = delta_keys.localCheckpoint(eager=True)
    touched_count = delta_keys.select("player_id").distinct().count()
    history = transform_within_boundary(inputs.events, inputs.boundary).select(*NARROW)
    pairs = transform_touched_pairs(delta_keys, history).localCheckpoint(eager=True)
    sources = transform_pair_sources(history, pairs).localCheckpoint(eager=True)
    source_count = sources.count()
    if clock is not None:
        clock.lap("read_pairs")
    derived = inputs.contributions(sources)
    fresh = derived.join(
        F.broadcast(pairs), ["player_id", "match_id"], "left_semi"
    ).localCheckpoint(eager=True)
    contributions = fresh.withColumn("generation", F.lit(generation))
    if clock is not None:
        clock.lap("recompute_contributions")
    contributions_path = delta_dir / SILVER_CONTRIBUTIONS
    totals_path = delta_dir / SILVER_TOTALS
    silver = spark.read.format("delta").load(str(contributions_path))
    # The pairs' old rows (what the totals lose; the contributions merge replaces
    # them): only pairs with records before the delta have any, and when none
    # does silver_contributions is not scanned at all.
    earlier = transform_earlier_pairs(sources, pairs, previous.boundary)
    earlier = earlier.localCheckpoint(eager=True)
    old = (
        silver.join(F.broadcast(earlier), PAIR, "left_semi")
        if not earlier.isEmpty()
        else silver.where(F.lit(False))
    )
    old = old.select(*CONTRIBUTION_KEYS, "aggregation", "points")
    old = old.localCheckpoint(eager=True)
    scope = (
        contributions.select(*TOTAL_KEYS)
        .unionByName(old.select(*TOTAL_KEYS))
        .distinct()
        .localCheckpoint(eager=True)
    )
    # The scope's old totals. Its keys are too many to broadcast (~0.8 M at 100 k
    # events over 1 M players, a 2 GiB driver), its players with their boards are
    # not (one row per touched player): the join filters silver_totals while it
    # is scanned, without shuffling it. The totals merge deletes by the same rows.
    scope_boards = transform_scope_boards(scope).localCheckpoint(eager=True)
    before = (
        transform_in_scope(
            spark.read.format("delta").load(str(totals_path)), scope_boards
        )
        .select(*TOTAL_KEYS, "aggregation", "score", "matches")
        .localCheckpoint(eager=True)  # read before the table it reads is merged
    )
    achieved = None
    players = timed_players(scope, inputs.boards.seasons)
    if players is not None:
        # The first-achieved fold needs each such player's whole history.
        achieved = transform_achieved(
            transform_touched_history(inputs.events, players),
            inputs.boundary,
            inputs.boards.seasons,
            inputs.boards.window_lateness_ms,
        )
    # sum totals from the old ones and the pairs' changes; only max boards (the
    # best contribution may be the one replaced) read the other pairs' rows.
    best = [
        r[0]
        for r in fresh.select("board", "aggregation")
        .unionByName(old.select("board", "aggregation"))
        .where(F.col("aggregation") == "max")
        .select("board")
        .distinct()
        .collect()
    ]
    summed = transform_sum_totals(before, old, fresh)
    if best:
        max_scope = transform_scope_boards(scope.where(F.col("board").isin(best)))
        summed = summed.where(~F.col("board").isin(best)).unionByName(
            transform_scope_totals(
                silver, fresh.where(F.col("board").isin(best)), pairs, max_scope
            )
        )
    totals = (
        with_achieved(summed, achieved)
        .join(scope, list(TOTAL_KEYS), "left_semi")
        .withColumn("generation", F.lit(generation))
        .localCheckpoint(eager=True)
    )
    if clock is not None:
        clock.lap("totals_inputs")
    # Boards to re-rank: those where a total may have changed, and those of a
    # player whose shadow flag changed since the previous generation.
    boards = {r[0] for r in scope.select("board").distinct().collect()}
    flipped = sorted(inputs.shadowed ^ hidden_players(previous))
    if flipped:
        flagged = spark.createDataFrame([(p,) for p in flipped], "player_id string")
        boards |= {
            r[0]
            for r in spark.read.format("delta")
            .load(str(totals_path))
            .join(F.broadcast(flagged), "player_id", "left_semi")
            .select("board")
            .distinct()
            .collect()
        }
    # A record's result names the boards whose version it moved: those boards'
    # segments are rewritten too (else a linked segment would keep versions of an
    # older boundary, which the next build's versions start from).
    named = transform_versions(delta.select("player_id", "raw")).select("board")
    listed = set(previous.manifest.get("boards", {}))
    boards |= {r[0] for r in named.distinct().collect()} & listed
    touched_boards = sorted(boards)
    # Silver written by a full publish of older code has no deletion vectors yet.
    enable_deletion_vectors(spark, contributions_path)
    enable_deletion_vectors(spark, totals_path)
    if clock is not None:
        clock.lap("touched_boards")
    # Every silver row of a touched pair is in ``old`` and every old total of the
    # scope in ``before``: replacing exactly those with the re-derived rows is the
    # merge (jobs/incremental.py load_replace).
    load_replace(spark, contributions_path, contributions, earlier, key_condition(PAIR))
    if clock is not None:
        clock.lap("merge_contributions")
    load_replace(spark, totals_path, totals, scope_boards, ON_SCOPE)
    if clock is not None:
        clock.lap("merge_totals")
    gold_path = delta_dir / GOLD_SNAPSHOTS
    # The previous generation's rows of the boards not re-ranked (every gold board
    # has a manifest entry): none to read when every board was touched, and a
    # positive board list lets the scan skip files by their board statistics.
    untouched = sorted(set(previous.manifest.get("boards", {})) - boards)
    kept = (
        spark.read.format("delta")
        .load(str(gold_path))
        .where(F.col("generation") == previous.generation)
        .where(F.col("board").isin(untouched) if untouched else F.lit(False))
        .select(*GOLD_COLUMNS)
    )
    if touched_boards:
        merged = spark.read.format("delta").load(str(totals_path))
        ranked = inputs.rank(merged.where(F.col("board").isin(touched_boards)))
        kept = kept.unionByName(ranked.select(*GOLD_COLUMNS))
    load_gold_snapshot(kept, gold_path, generation)
    if clock is not None:
        clock.lap("rank_gold")
    return Build(
        MODE_INCREMENTAL,
        "",
        base=previous.generation,
        touched_boards=touched_boards,
        touched_players=touched_count,
        rederived_records=source_count,
        shadowed=sorted(inputs.shadowed),
    )


def publish_segments(
    settings: Settings,
    spark: SparkSession,
    boards: BoardsConfig,
    generation: str,
    number: int,
    inputs: LandedInputs,
    *,
    bucket_target: int = DEFAULT_BUCKET_TARGET,
    fail_at: str | None = None,
    clock: PhaseClock | None = None,
    build: Build | None = None,
) -> str:
    """Phase 3: segments, the manifest row, LAST ``manifest.json``; retention.

    ``build``: how phase 2 built the generation (default: what it saved)."""
    delta_dir = settings.delta_dir
    manifest_path = delta_dir / GOLD_MANIFEST
    boundary = inputs.boundary
    if build is None:
        build = Build.load(build_path(settings, generation))
    base = _segment_base(settings, spark, build)
    # An incremental build rewrites only the boards it re-ranked; the rest are the
    # previous generation's files (None: every board).
    only = build.touched_boards if base is not None and build is not None else None
    rows = (
        spark.read.format("delta")
        .load(str(delta_dir / GOLD_SNAPSHOTS))
        .where(F.col("generation") == generation)
    )
    if only is not None:
        rows = rows.where(F.col("board").isin(only))
    named, previous_files = _named_versions(settings, spark, boundary, base, only)
    target = settings.segments_dir / generation
    tmp = settings.segments_dir / f"{TMP_PREFIX}{generation}-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        # Written by the executors (jobs/segment_tasks.py), each row with its
        # pair's version; only the board entries come back to the driver.
        board_files, sides = write_segments_distributed(
            rows,
            named,
            tmp,
            bucket_target,
            board_orders(boards),
            umask=JOB_UMASK,
            previous=previous_files,
            visit=only or (),
        )
        # Shadowed players: in silver, left out of this generation's gold.
        write_hidden(
            _hidden_rows(settings, spark, generation, build, only), tmp, board_files
        )
        if base is not None:
            previous, checksums = base
            rewritten = set(only or ())
            for board in previous.manifest.get("boards", {}):
                if board not in rewritten:
                    board_files[board] = link_board(previous, board, tmp, checksums)
            sides = _link_versions(previous, checksums, tmp, rewritten, sides)
        fsync_dir(tmp)
        if target.exists():  # left by a crash before its manifest row: never visible
            shutil.rmtree(target)
        os.rename(tmp, target)
        fsync_dir(settings.segments_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if clock is not None:
        clock.lap("segments")
    if fail_at == "before_manifest_row":
        raise PublishAborted(f"{generation}: aborted before the manifest row")

    published_at = datetime.now(UTC)
    versions = table_versions(
        delta_dir, (BRONZE, SILVER_CONTRIBUTIONS, SILVER_TOTALS, GOLD_SNAPSHOTS)
    )
    thresholds = _thresholds(settings, spark, base, only)
    manifest_json = build_manifest(
        generation,
        published_at,
        boundary,
        board_files,
        thresholds,
        table_versions=versions,
        landing_started_at=inputs.landing_started_at,
        build=_build_entry(build, base),
        versions={board: name for board, (name, _) in sides.items()},
    )
    row = {
        "generation": generation,
        "generation_number": number,
        "boundary": {str(p): int(v) for p, v in boundary.items()},
        "board_count": len(board_files),
        "populations": {b: int(v["population"]) for b, v in board_files.items()},
        "checksums": {
            **{
                name: digest
                for v in board_files.values()
                for name, digest in v["checksums"].items()
            },
            **dict(sides.values()),
        },
        "published_at": published_at,
        "complete": True,
        "manifest_json": manifest_json,
    }
    load_manifest_row(spark, manifest_path, row, number)
    if fail_at == "before_manifest_json":
        raise PublishAborted(f"{generation}: aborted before manifest.json")
    atomic_write_text(target / MANIFEST_FILE, manifest_json)
    build_path(settings, generation).unlink(missing_ok=True)

    if clock is not None:
        clock.lap("manifest")
    published = extract_published(spark, manifest_path)
    _retain(settings, published)
    if clock is not None:
        clock.lap("retention")
    return generation


def _segment_base(
    settings: Settings, spark: SparkSession, build: Build | None
) -> tuple[Previous, dict[str, str]] | None:
    """The previous generation whose untouched boards an incremental build links,
    with its per-file checksums; None when the segments are written in full."""
    if build is None or build.mode != MODE_INCREMENTAL or build.base is None:
        return None
    directory = settings.segments_dir / build.base
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return None  # gone: gold holds every row, so write every board
    if "versions" not in manifest:
        # Written before the versions side files: its pairs' versions are not all
        # on disk, so every board is written with the whole log's versions.
        return None
    row = (
        spark.read.format("delta")
        .load(str(settings.delta_dir / GOLD_MANIFEST))
        .where(F.col("generation") == build.base)
        .select("checksums")
        .first()
    )
    if row is None:
        return None
    boundary = {int(p): int(v) for p, v in manifest.get("boundary", {}).items()}
    previous = Previous(build.base, boundary, manifest, directory)
    return previous, dict(row["checksums"])


def _hidden_rows(
    settings: Settings,
    spark: SparkSession,
    generation: str,
    build: Build | None,
    only: list[str] | None,
) -> list[tuple[str, str, int]]:
    """(board, player_id, score) of the rewritten boards' players silver holds and
    gold left out. The ranking drops exactly the shadowed players' totals
    (``transform_public``), so when the build recorded them (incremental) those are
    their silver rows on the rewritten boards: a filtered scan of silver_totals, not
    a join of all of them with the generation's gold rows."""
    silver_totals = spark.read.format("delta").load(
        str(settings.delta_dir / SILVER_TOTALS)
    )
    if only is not None:
        silver_totals = silver_totals.where(F.col("board").isin(only))
        if build is not None and build.shadowed is not None:
            if not build.shadowed or not only:
                return []
            rows = (
                silver_totals.where(F.col("player_id").isin(build.shadowed))
                .select("board", "player_id", "score")
                .collect()
            )
            return [(r["board"], r["player_id"], int(r["score"])) for r in rows]
    gold = spark.read.format("delta").load(str(settings.delta_dir / GOLD_SNAPSHOTS))
    if only is not None:
        gold = gold.where(F.col("board").isin(only))
    return hidden_from(silver_totals, gold, generation)


def _thresholds(
    settings: Settings,
    spark: SparkSession,
    base: tuple[Previous, dict[str, str]] | None,
    only: list[str] | None,
) -> dict[str, dict[str, int]]:
    """The manifest's quarantine thresholds. A board's thresholds are a function of
    its silver contributions, which an incremental build changes only on boards it
    rewrites: the others keep the previous manifest's, and the quantiles are taken
    over the rewritten boards' rows only."""
    contributions = spark.read.format("delta").load(
        str(settings.delta_dir / SILVER_CONTRIBUTIONS)
    )
    quantile, samples = settings.quarantine_quantile, settings.quarantine_min_samples
    if base is None or only is None or "board" not in contributions.columns:
        return extract_thresholds(contributions, quantile, samples)
    rewritten = set(only)
    kept = {
        board: dict(cohorts)
        for board, cohorts in (base[0].manifest.get("quarantine") or {}).items()
        if board not in rewritten
    }
    fresh = (
        extract_thresholds(
            contributions.where(F.col("board").isin(sorted(rewritten))),
            quantile,
            samples,
        )
        if rewritten
        else {}
    )
    return dict(sorted({**kept, **fresh}.items()))


def _named_versions(
    settings: Settings,
    spark: SparkSession,
    boundary: Mapping[int, int],
    base: tuple[Previous, dict[str, str]] | None,
    only: list[str] | None,
) -> tuple[DataFrame, tuple[Path, dict[str, tuple[str | None, str | None]]] | None]:
    """The versions the segment writer starts from (jobs/versions.py): the log's
    delta and the previous generation's files (board -> (segment, side file)) when
    this build rewrites only some boards of one, else the whole log's."""
    if base is None or only is None:
        return named_versions(spark, bronze_path(settings), boundary), None
    previous = base[0]
    sides = previous.manifest.get("versions") or {}
    segments = {b: m.get("file") for b, m in previous.manifest["boards"].items()}
    files = {b: (segments.get(b), sides.get(b)) for b in {*segments, *sides}}
    named = named_versions(
        spark, bronze_path(settings), boundary, since=previous.boundary
    )
    return named, (previous.directory, files)


def _link_versions(
    previous: Previous,
    checksums: Mapping[str, str],
    directory: Path,
    rewritten: set[str],
    sides: dict[str, tuple[str, str]],
) -> dict[str, tuple[str, str]]:
    """``sides`` plus the previous generation's side files of the boards nothing
    rewrote (hard links). The writer visits every rewritten board and every board
    the delta names; a board it visited without a segment to rewrite must have had
    none (the recompute rewrites every listed board the delta names), else its
    linked segment's versions would be stale."""
    listed = set(previous.manifest.get("boards", {}))
    stale = sorted((set(sides) - rewritten) & listed)
    if stale:
        raise RuntimeError(f"versions of linked boards changed: {stale[:5]}")
    out = dict(sides)
    for board, name in (previous.manifest.get("versions") or {}).items():
        if board in rewritten or board in sides:
            continue
        os.link(previous.directory / name, directory / name)
        out[board] = (name, checksums[name])
    return out


def _build_entry(
    build: Build | None, base: tuple[Previous, dict[str, str]] | None
) -> dict[str, Any] | None:
    if build is None:
        return None
    entry = build.manifest_entry()
    if build.mode == MODE_INCREMENTAL and base is None:
        # Silver was merged, but every segment was written from gold.
        entry["segments"] = "full"
    return entry


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
    generation, number = next_generation(settings, spark)
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
    )


def main() -> None:
    from conf.settings import get_settings

    print(run_publish(get_settings()))


if __name__ == "__main__":
    main()


@dataclass(frozen=True, slots=True)
class GenerationCheck:
    """A published generation's gold rows against a full recompute of its boundary."""

    generation: str
    build: dict[str, Any]
    rows: int
    only_in_gold: int
    only_in_recompute: int

    @property
    def ok(self) -> bool:
        return self.only_in_gold == 0 and self.only_in_recompute == 0


def check_generation(
    settings: Settings,
    spark: SparkSession,
    generation: str | None = None,
    boards: BoardsConfig | None = None,
) -> GenerationCheck:
    """Recompute ``generation`` (default: the latest) in full from bronze up to its
    boundary, without writing anything, and count the gold rows each side lacks
    (board, position, rank, player, score, achieved_ms; ``EXCEPT ALL`` both ways).

    The players it left out are taken from its hidden files, so a shadow flag
    changed since does not count as a difference. An incremental generation must
    come out identical (``lb verify --check-incremental``).
    """
    published = extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
    rows = [r for r in published if generation is None or r.generation == generation]
    if not rows:
        raise ValueError(f"{generation or 'no generation'} is not published")
    row = rows[-1]
    manifest = json.loads(row.manifest_json)
    boundary = {int(p): int(v) for p, v in manifest["boundary"].items()}
    directory = settings.segments_dir / row.generation
    shadowed = hidden_players(Previous(row.generation, boundary, manifest, directory))
    bronze = bronze_path(settings)
    if boards is None:
        boards = load_boards(settings.boards_file)
    rule_state = load_rule_state(settings.data_dir)
    boards = effective_boards(boards, rule_state)
    inputs = RecomputeInputs(
        events=with_record_columns(spark.read.format("delta").load(str(bronze))),
        boundary=boundary,
        seasons=[*boards.seasons, *namespace_seasons(boards, rule_state)],
        boards=boards,
        registry=default_registry(settings.points_min, settings.points_max),
        shadowed=shadowed,
        partitions=int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
    )
    contributions, achieved = inputs.silver(inputs.events)
    totals = with_achieved(transform_totals(contributions), achieved)
    fresh = inputs.rank(totals).select(*GOLD_COLUMNS).localCheckpoint(eager=True)
    gold = (
        spark.read.format("delta")
        .load(str(settings.delta_dir / GOLD_SNAPSHOTS))
        .where(F.col("generation") == row.generation)
        .select(*GOLD_COLUMNS)
    )
    return GenerationCheck(
        row.generation,
        manifest.get("build") or {"mode": "unknown"},
        gold.count(),
        gold.exceptAll(fresh).count(),
        fresh.exceptAll(gold).count(),
    )
