"""Replay a season under another scoring rule, and diff it against the season.

``lb replay --season S4 --rule v2``:

1. registers the replay (``conf/rule_state.py``) so that every publish also computes
   ``season:S4@v2:<scope>``: the season's window and recorded events, scored under
   ``v2`` from each event's match record (jobs/rules.py);
2. publishes a generation, so the season and its replay are ranked from the same
   bronze at the same boundary;
3. diffs the two in that generation per scope and player (``transform_diff``), writes
   the rows to the Delta table ``gold_replay_diffs`` and returns a summary: players
   whose rank moves by more than K, tier changes, the largest movers.

``--promote`` then switches the season to the rule (audited) and publishes again:
the season's boards are computed under the new rule from that generation on.

``game``: the season's game. Another game's season ``S4`` is the internal season
``arena~S4`` (conf/boards.qualify): its replay boards are
``arena~season:S4@v2:<scope>`` (read as ``/v1/games/arena/boards/season:S4@v2:...``),
its diff rows carry ``game`` and the replay ``arena~S4@v2``, and promoting it leaves
every other game's ``S4`` alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conf.boards import DEFAULT_GAME, BoardsConfig, Season, load_boards, qualify
from conf.rule_state import (
    effective_boards,
    load_rule_state,
    namespace,
    save_rule_state,
)
from conf.rules import RULE_VERSIONS
from conf.settings import Settings
from jobs.tables import GOLD_MANIFEST, extract_published, generation_ranking

GOLD_REPLAY_DIFFS = "gold_replay_diffs"
DEFAULT_K = 10
TOP_MOVERS = 5


class ReplayError(ValueError):
    """The season or rule is unknown, or the replay cannot run."""


@dataclass
class ReplaySummary:
    season: str
    rule: str
    generation: str
    k: int
    # scope -> counts and movers
    scopes: dict[str, dict[str, Any]] = field(default_factory=dict)
    promoted: str | None = None
    game: str = DEFAULT_GAME

    def lines(self) -> list[str]:
        of_game = "" if self.game == DEFAULT_GAME else f" of game {self.game}"
        out = [
            f"replay {self.season}{of_game} under {self.rule} in {self.generation}: "
            f"boards season:{namespace(self.season, self.rule)}:<scope>"
        ]
        for scope, s in sorted(self.scopes.items()):
            out.append(
                f"  {scope}: {s['players']} players, {s['moved']} move more than "
                f"{self.k} ranks, {s['tierChanges']} tier changes, "
                f"{s['entered']} only under {self.rule}, {s['left']} only under the "
                "current rule"
            )
            for m in s["largestMovers"]:
                out.append(
                    f"    {m['playerId']}: rank {m['oldRank']} -> {m['newRank']} "
                    f"({m['move']:+d}), score {m['oldScore']} -> {m['newScore']}"
                )
        if self.promoted:
            out.append(
                f"promoted: season {self.season} now scores under "
                f"{self.rule} from {self.promoted}"
            )
        return out


def tier_of(tiers: Sequence[Any], rank: int | None, population: int) -> str | None:
    """The best tier a competition rank earns (tiers best first: ``top`` N or
    ``topPercent`` P of the population, rounded up); None when none or no rank."""
    if rank is None:
        return None
    for tier in tiers:
        top = getattr(tier, "top", None)
        percent = getattr(tier, "top_percent", None)
        if percent is None:
            percent = getattr(tier, "topPercent", None)
        if top is not None and rank <= top:
            return str(tier.name)
        if percent is not None and rank <= math.ceil(population * percent / 100):
            return str(tier.name)
    return None


def transform_diff(
    gold: DataFrame, season_id: str, rule: str, game: str = DEFAULT_GAME
) -> DataFrame:
    """Per (scope, player): old (season) and new (replay) score and rank.

    ``gold`` holds one generation's ranked rows (board, player_id, score, rank);
    ``move`` = old rank - new rank (positive: up), null when on one side only.
    ``season_id`` as ``game`` names it (its boards are ``game``'s internal ids).
    """
    old_prefix = qualify(game, f"season:{season_id}:")
    new_prefix = qualify(game, f"season:{namespace(season_id, rule)}:")

    def side(prefix: str, tag: str) -> DataFrame:
        rows = gold.where(F.col("board").startswith(prefix))
        population = rows.groupBy("board").agg(F.count(F.lit(1)).alias("_pop"))
        return rows.join(population, "board").select(
            F.substring(F.col("board"), len(prefix) + 1, 1000).alias("scope"),
            "player_id",
            F.col("score").alias(f"{tag}_score"),
            F.col("rank").alias(f"{tag}_rank"),
            F.col("_pop").alias(f"{tag}_population"),
        )

    joined = side(old_prefix, "old").join(
        side(new_prefix, "new"), ["scope", "player_id"], "full_outer"
    )
    return joined.withColumn("move", F.col("old_rank") - F.col("new_rank"))


def summarize(
    rows: Iterable[dict[str, Any]], k: int, rule: str
) -> dict[str, dict[str, Any]]:
    """Counts and largest movers per scope from diff rows (with tiers filled)."""
    scopes: dict[str, dict[str, Any]] = {}
    by_scope: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_scope.setdefault(row["scope"], []).append(row)
    for scope, items in by_scope.items():
        movers = [r for r in items if r["move"] is not None]
        movers.sort(key=lambda r: (-abs(r["move"]), r["player_id"]))
        scopes[scope] = {
            "players": len(items),
            "moved": sum(1 for r in movers if abs(r["move"]) > k),
            "tierChanges": sum(1 for r in items if r["old_tier"] != r["new_tier"]),
            "entered": sum(1 for r in items if r["old_rank"] is None),
            "left": sum(1 for r in items if r["new_rank"] is None),
            "largestMovers": [
                {
                    "playerId": r["player_id"],
                    "oldRank": r["old_rank"],
                    "newRank": r["new_rank"],
                    "move": r["move"],
                    "oldScore": r["old_score"],
                    "newScore": r["new_score"],
                }
                for r in movers[:TOP_MOVERS]
                if r["move"] != 0
            ],
        }
    return scopes


def load_diff(
    spark: SparkSession,
    rows: list[dict[str, Any]],
    path: Path,
    replay: str,
    game: str = DEFAULT_GAME,
) -> None:
    """Replace the rows of ``replay`` (the internal namespace, ``S4@v2`` or
    ``arena~S4@v2``: unique across games, so one game's replay never replaces
    another's). A table written before games has no ``game`` column: mergeSchema
    adds it, and its old rows read null, the game default's."""
    schema = (
        "replay string, generation string, scope string, player_id string, "
        "old_score bigint, new_score bigint, old_rank bigint, new_rank bigint, "
        "move bigint, old_tier string, new_tier string, tier_changed boolean, "
        "game string"
    )
    df = spark.createDataFrame(
        [
            (
                replay,
                r["generation"],
                r["scope"],
                r["player_id"],
                r["old_score"],
                r["new_score"],
                r["old_rank"],
                r["new_rank"],
                r["move"],
                r["old_tier"],
                r["new_tier"],
                r["old_tier"] != r["new_tier"],
                game,
            )
            for r in rows
        ],
        schema,
    )
    (
        df.write.format("delta")
        .mode("overwrite")
        .partitionBy("replay")
        .option("replaceWhere", f"replay = '{replay}'")
        .option("mergeSchema", "true")
        .save(str(path))
    )


def diff_generation(
    spark: SparkSession,
    settings: Settings,
    boards: BoardsConfig,
    season_id: str,
    rule: str,
    generation: str,
    k: int,
    game: str = DEFAULT_GAME,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Diff rows (written to gold_replay_diffs) and the per-scope summary;
    ``boards``: the file's, ``season_id`` as ``game`` names it."""
    season = game_season(boards, game, season_id)
    # The generation's full ranking of the season's and the replay's boards (a
    # layered generation's ranked again from its chain, jobs/tables.py).
    published = [
        r
        for r in extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
        if r.generation == generation
    ]
    if not published:
        raise ValueError(f"{generation} is not published")
    manifest = json.loads(published[-1].manifest_json)
    prefixes = (
        qualify(game, f"season:{season_id}:"),
        qualify(game, f"season:{namespace(season_id, rule)}:"),
    )
    gold = generation_ranking(
        spark,
        settings.delta_dir,
        generation,
        manifest,
        effective_boards(boards, load_rule_state(settings.data_dir)),
        [b for b in manifest.get("boards", {}) if b.startswith(prefixes)],
    )
    tiers = list(getattr(season, "tiers", None) or [])
    rows = []
    for r in transform_diff(gold, season_id, rule, game).collect():
        row = r.asDict()
        row["generation"] = generation
        row["old_tier"] = tier_of(tiers, row["old_rank"], row["old_population"] or 0)
        row["new_tier"] = tier_of(tiers, row["new_rank"], row["new_population"] or 0)
        rows.append(row)
    rows.sort(key=lambda r: (r["scope"], r["player_id"]))
    replay = qualify(game, namespace(season_id, rule))
    load_diff(spark, rows, settings.delta_dir / GOLD_REPLAY_DIFFS, replay, game)
    return rows, summarize(rows, k, rule)


def run_replay(
    settings: Settings,
    season_id: str,
    rule: str,
    *,
    k: int = DEFAULT_K,
    promote: bool = False,
    actor: str = "cli",
    reason: str | None = None,
    spark: SparkSession | None = None,
    game: str = DEFAULT_GAME,
) -> ReplaySummary:
    """Register, publish and diff a replay of ``game``'s season; with
    ``promote``, switch the season."""
    from jobs.publish import run_publish

    boards = load_boards(settings.boards_file)
    game_season(boards, game, season_id)
    if rule not in RULE_VERSIONS:
        raise ReplayError(
            f"unknown scoring rule {rule!r}; known: {', '.join(RULE_VERSIONS)}"
        )
    if spark is None:
        from jobs.spark import get_spark

        spark = get_spark("replay")
    state = load_rule_state(settings.data_dir)
    registered = (qualify(game, season_id), rule)
    if registered not in state.replays:
        state.replays.append(registered)
        save_rule_state(settings.data_dir, state)
    generation = run_publish(settings, spark=spark, boards=boards)
    _rebase(settings, generation)
    _, scopes = diff_generation(
        spark, settings, boards, season_id, rule, generation, k, game
    )
    summary = ReplaySummary(season_id, rule, generation, k, scopes, game=game)
    if promote:
        summary.promoted = promote_season(
            settings,
            season_id,
            rule,
            actor=actor,
            reason=reason,
            replay_generation=generation,
            scopes=scopes,
            spark=spark,
            game=game,
        )
    return summary


def promote_season(
    settings: Settings,
    season_id: str,
    rule: str,
    *,
    actor: str,
    reason: str | None = None,
    replay_generation: str | None = None,
    scopes: dict[str, dict[str, Any]] | None = None,
    spark: SparkSession | None = None,
    game: str = DEFAULT_GAME,
) -> str:
    """Switch ``game``'s season to ``rule`` (audited) and publish a generation
    under it; returns that generation."""
    from jobs.publish import run_publish
    from speed.audit import record_audit_sync
    from speed.connection import sync_client
    from speed.server import resolve_redis_url

    boards = load_boards(settings.boards_file)
    season = game_season(boards, game, season_id)
    if rule not in RULE_VERSIONS:
        raise ReplayError(f"unknown scoring rule {rule!r}")
    key = qualify(game, season_id)
    if spark is None:
        from jobs.spark import get_spark

        spark = get_spark("promote")
    state = load_rule_state(settings.data_dir)
    previous = state.promoted.get(key, season.rule)
    client = sync_client(resolve_redis_url(settings))
    try:
        # Audited before the switch: an audit entry without a switch is visible and
        # harmless, a switch without one would not be.
        record_audit_sync(
            client,
            actor,
            "rule.promote",
            qualify(game, f"season:{season_id}"),
            reason or f"promote {rule} after replay in {replay_generation}",
            {
                "from": previous,
                "to": rule,
                "replayGeneration": replay_generation,
                "summary": scopes or {},
            },
        )
    finally:
        client.close()
    state.promoted[key] = rule
    save_rule_state(settings.data_dir, state)
    generation = run_publish(settings, spark=spark, boards=boards)
    _rebase(settings, generation)
    # The live totals and contribution records in Redis were scored under the old
    # rule: rebuild the speed layer from the log, the season summed under the new one
    # (speed/rebuild.py), so live answers and later corrections agree with the
    # generation. (The promotion itself was audited above.)
    from jobs.rebuild import run_rebuild

    run_rebuild(settings, spark=spark)
    return generation


def game_season(boards: BoardsConfig, game: str, season_id: str) -> Season:
    """``game``'s season ``season_id``; ReplayError naming what is missing."""
    own = boards.game(game)
    if own is None:
        raise ReplayError(
            f"no game {game!r} in the boards file; games: {', '.join(boards.game_ids)}"
        )
    season = own.season(season_id)
    if season is None:
        where = "the boards file" if game == DEFAULT_GAME else f"game {game!r}"
        raise ReplayError(f"no season {season_id!r} in {where}")
    return season


def _rebase(settings: Settings, generation: str) -> None:
    from speed.rebase import rebase_published

    rebase_published(settings, generation)
