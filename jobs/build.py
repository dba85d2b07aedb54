"""Phase 2 of a publish: a generation's silver and ranked gold, and its check.

Silver (contributions, totals) and the ranked ``gold_snapshots`` rows of a
generation, from bronze up to its boundary: in full, or incrementally from the
previous generation when it is a valid base (jobs/incremental.py). The
:class:`~jobs.incremental.Build` that says which is saved for the segments phase
(jobs/segments.py), a separate Airflow task. :func:`check_generation` recomputes a
published generation in full and compares it with its gold rows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import GAME_SEP, BoardsConfig, Season, board_rules, load_boards
from conf.rule_state import effective_boards, load_rule_state, namespace_seasons
from conf.rules import RuleRegistry, default_registry
from conf.settings import Settings
from jobs.incremental import (
    GOLD_MAX_FRACTION,
    MODE_FULL,
    Build,
    Previous,
    build_path,
    fingerprint,
    hidden_players,
    histogram_change_path,
    previous_state,
    recompute_incremental,
    set_silver_properties,
    silver_properties,
)
from jobs.land import bronze_path, table_exists, transform_records
from jobs.phase_clock import PhaseClock
from jobs.publish_lock import scratch_dir
from jobs.rank import asc_boards, board_orders, transform_rank
from jobs.recompute import (
    transform_achieved,
    transform_recompute,
    transform_totals,
    with_achieved,
    with_record_columns,
)
from jobs.segments import DEFAULT_BUCKET_TARGET
from jobs.shadow import extract_shadowed, transform_public
from jobs.spark import materialize, rows_in_order
from jobs.tables import (
    GOLD_COLUMNS,
    GOLD_MANIFEST,
    GOLD_SNAPSHOTS,
    SILVER_CONTRIBUTIONS,
    SILVER_TOTALS,
    PublishedRow,
    extract_published,
    game_column,
    generation_ranking,
    load_gold_snapshot,
)

log = logging.getLogger(__name__)


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
            boards=self.boards,
        )
        return contributions

    def silver(self, events: DataFrame) -> tuple[DataFrame, DataFrame | None]:
        """(contributions, first-achieved times) of ``events`` up to the boundary."""
        contributions = self.contributions(events)
        achieved = transform_achieved(
            events,
            self.boundary,
            self.boards.seasons,
            self.boards.window_lateness_ms,
            self.boards,
        )
        return contributions, achieved

    def rank(self, totals: DataFrame) -> DataFrame:
        unique = [b for b, (_, u) in board_orders(self.boards).items() if u]
        return transform_rank(
            transform_public(totals, self.shadowed),
            self.partitions,
            unique,
            asc_boards(self.boards),
        )


def load_silver(
    spark: SparkSession,
    contributions: DataFrame,
    delta_dir: Path,
    generation: str,
    clock: PhaseClock | None = None,
    achieved: DataFrame | None = None,
    asc: Column | None = None,
) -> DataFrame:
    """Write silver contributions, then totals computed from the written table.

    Silver holds the latest recompute (overwritten by a full build, merged by an
    incremental one; a row carries the generation that last wrote it). Totals read
    the committed contributions back instead of recomputing them, so the recompute
    runs once. Returns the committed totals.
    """
    rows = (
        contributions.withColumn("generation", F.lit(generation))
        .withColumn("game", game_column(F.col("board")))
        # The match as its game sent it (with_game qualified it for the recompute).
        .withColumn("match_id", F.substring_index(F.col("match_id"), GAME_SEP, -1))
    )
    path = delta_dir / SILVER_CONTRIBUTIONS
    (
        rows.write.format("delta")
        .mode("overwrite")
        # Extend the schema in place (a new column), never replace it: the column
        # comments and table properties (jobs/hygiene.py) stay.
        .option("mergeSchema", "true")
        .options(**silver_properties(path, rows.columns))
        .partitionBy("partition")
        .save(str(path))
    )
    set_silver_properties(spark, path)
    if clock is not None:
        clock.lap("recompute_contributions")
    written = spark.read.format("delta").load(str(path))
    totals = (
        with_achieved(
            transform_totals(written.drop("generation", "game"), asc), achieved
        )
        .withColumn("generation", F.lit(generation))
        .withColumn("game", game_column(F.col("board")))
    )
    path = delta_dir / SILVER_TOTALS
    (
        totals.write.format("delta")
        .mode("overwrite")
        # Extend the schema in place (a new column), never replace it: the column
        # comments and table properties (jobs/hygiene.py) stay.
        .option("mergeSchema", "true")
        .options(**silver_properties(path, totals.columns))
        .save(str(path))
    )
    set_silver_properties(spark, path)
    if clock is not None:
        clock.lap("totals")
    return spark.read.format("delta").load(str(path))


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
    published: list[PublishedRow] | None = None,
) -> Build:
    """Phase 2: silver (contributions, totals) and the ranked gold snapshot of
    ``generation`` from bronze up to ``boundary``.

    Promoted rules apply to their seasons, registered replays add their namespace
    boards (conf/rule_state.py), and shadowed players stay out of gold (read from
    the speed layer's flags unless ``read_flags`` is false).

    Incremental (jobs/incremental.py) when the previous generation is a valid base
    and ``full`` is false; the returned :class:`Build` says which, and is also saved
    for :func:`publish_segments` (a separate Airflow task). ``published``: the
    published generations as this publish read them first (jobs/repair.py
    ``prepare_generation``); read from ``gold_manifest`` when not given."""
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
        if published is None:
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
        build = Build(MODE_FULL, fp, shadowed=sorted(shadowed))
    else:
        build = recompute_incremental(
            spark,
            delta_dir,
            generation,
            recompute,
            previous,
            clock,
            gold_layering=(settings.layers_max_chain, GOLD_MAX_FRACTION)
            if settings.layers_max_chain >= 1
            else None,
            histogram_change=histogram_change_path(settings, generation),
        )
        build.fingerprint = fp
    build.save(build_path(settings, generation))
    return build


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
        spark,
        contributions,
        delta_dir,
        generation,
        clock,
        achieved,
        asc_boards(inputs.boards),
    )
    load_gold_snapshot(inputs.rank(totals_now), delta_dir / GOLD_SNAPSHOTS, generation)
    if clock is not None:
        clock.lap("rank_gold")


@dataclass(frozen=True, slots=True)
class GenerationCheck:
    """A published generation's gold rows against a full recompute of its boundary."""

    generation: str
    build: dict[str, Any]
    rows: int
    only_in_gold: int
    only_in_recompute: int
    # Where the generation's served segments (a layered board merged from its base
    # and layers, serving/layers.py) answer otherwise than the full recompute: one
    # message per difference (the first SERVED_DIFFERENCES_SHOWN).
    served_differences: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (
            self.only_in_gold == 0
            and self.only_in_recompute == 0
            and not self.served_differences
        )


# Differences past this many are not described (the first ones locate a bug).
SERVED_DIFFERENCES_SHOWN = 20


def served_differences(
    directory: Path,
    manifest: Mapping[str, Any],
    boards: BoardsConfig,
    fresh: DataFrame,
    scratch: Path,
) -> list[str]:
    """Compare every board of the generation in ``directory`` as the API reads it
    (``serving.layers.load_board``: a full segment, or a base merged with its
    layers) with the full recompute's rows ``fresh`` (GOLD_COLUMNS): each
    position's rank, player and (oriented) score, and each board's population.

    The recompute's rows stream to the driver board by board in display order
    (sorted runs under ``scratch``), so only one board's segment is open at a
    time."""
    from serving.layers import load_board

    metas: Mapping[str, Any] = manifest.get("boards", {})
    out: list[str] = []
    seen: set[str] = set()

    def note(message: str) -> None:
        if len(out) < SERVED_DIFFERENCES_SHOWN:
            out.append(message)

    current: str | None = None
    segment: Any = None
    count = 0

    def finish() -> None:
        if current is not None and segment is not None and segment.population != count:
            note(
                f"{current}: served {segment.population} players, the recompute {count}"
            )

    rows = fresh.select("board", "position", "rank", "player_id", "score")
    # Board by board in display order, read as sorted runs (jobs/spark.py
    # rows_in_order, not toLocalIterator, whose fetched results stay on the
    # driver's heap): positions are dense, 1 to the board's count.
    counts = sorted(
        (r["board"], int(r["count"])) for r in rows.groupBy("board").count().collect()
    )
    spans = [(board, 1, count) for board, count in counts]
    for r in rows_in_order(rows, "board", "position", spans, scratch):
        board = r["board"]
        if board != current:
            finish()
            current, count, segment = board, 0, None
            seen.add(board)
            if board in metas:
                segment = load_board(directory, board, dict(metas[board]))
            else:
                note(f"{board}: in the recompute, not in the generation's segments")
        count += 1
        if segment is None:
            continue
        expected = (
            int(r["position"]),
            int(r["rank"]),
            r["player_id"],
            board_rules(boards, board).orient(int(r["score"])),
        )
        if expected[0] > segment.population:
            continue  # counted by finish()
        e = segment.entry(expected[0] - 1)
        served = (e["position"], e["rank"], e["playerId"], e["score"])
        if served != expected:
            note(f"{board}: served {served}, the recompute {expected}")
    finish()
    for board in sorted(set(metas) - seen):
        population = int(metas[board].get("population", 0))
        if population:
            note(f"{board}: served {population} players, not in the recompute")
    return out


def check_generation(
    settings: Settings,
    spark: SparkSession,
    generation: str | None = None,
    boards: BoardsConfig | None = None,
) -> GenerationCheck:
    """Recompute ``generation`` (default: the latest) in full from bronze up to its
    boundary, without writing anything, and count the gold rows each side lacks
    (board, position, rank, player, score, achieved_ms; ``EXCEPT ALL`` both ways),
    then compare the served segments, layered or not, with the recompute's rows
    (:func:`served_differences`).

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
    totals = with_achieved(
        transform_totals(contributions, asc_boards(boards)), achieved
    )
    fresh = inputs.rank(totals).select(*GOLD_COLUMNS).transform(materialize)
    gold = generation_ranking(
        spark, settings.delta_dir, row.generation, manifest, boards
    ).transform(materialize)
    return GenerationCheck(
        row.generation,
        manifest.get("build") or {"mode": "unknown"},
        gold.count(),
        gold.exceptAll(fresh).count(),
        fresh.exceptAll(gold).count(),
        tuple(
            served_differences(
                directory, manifest, boards, fresh, scratch_dir(settings, "verify")
            )
        ),
    )
