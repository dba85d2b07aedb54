"""Operations around a season close (the DAG ``season_close``): which season a run
closes, whether every partition can land through its close time, and a check of the
award snapshot against an offline recompute from Delta.

The close itself is ``jobs.season.close_season`` (the season job's); this module only
reads: Redis, the boards file, Delta bronze and the served award snapshot. The
served snapshot comes in as a ``jobs.verify.ServedReads`` (the API's read service
without HTTP, which the DAG builds with ``api.served.served_reads``): the batch
layer does not import the API.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.boards import (
    BoardsConfig,
    Season,
    board_order,
    game_seasons,
    load_boards,
    qualify,
    resolve_season,
)
from conf.settings import Settings
from jobs.rank import asc_boards
from jobs.recompute import transform_achieved, transform_recompute
from jobs.spark import get_spark
from jobs.verify import ServedReads, extract_events, transform_offline_ranks
from serving.awards import season_boards
from speed.connection import sync_client
from speed.partitions import Keys
from speed.server import resolve_redis_url

AWARDS_PAGE = 1000


class SeasonUnknown(ValueError):
    pass


def _season(config: BoardsConfig, season_id: str) -> Season:
    """The season of an internal season id (``<game>~S4`` for another game's)."""
    season = resolve_season(config, season_id)
    if season is None:
        raise SeasonUnknown(f"no season {season_id!r} in the boards file")
    return season


def season_for_run(
    settings: Settings, requested: str | None, logical_date: datetime | None
) -> str:
    """The season named in the run's conf (``{"season": "S4", "game": "arena"}``),
    else the one closing at the run's date: its internal id (``<game>~S4`` for a
    game other than default), which the run's tasks carry."""
    config = load_boards(settings.boards_file)
    if requested:
        return _season(config, requested).id
    if logical_date is not None:
        moment = logical_date.astimezone(UTC)
        for game, season in game_seasons(config):
            if abs(season.cutoff - moment) < timedelta(seconds=1):
                return qualify(game, season.id)
    raise SeasonUnknown(
        f"no season closes at {logical_date}; pass {{'season': '<id>'}} in the conf"
    )


def completeness(settings: Settings, season_id: str) -> tuple[bool, str]:
    """(True, "") once the close time has passed and every partition's log continues
    where landing stopped (so the close can land everything up to the cutoff)."""
    season = _season(load_boards(settings.boards_file), season_id)
    now = datetime.now(UTC)
    if now < season.cutoff:
        return False, f"closes at {season.cutoff.isoformat()}"
    client = sync_client(
        resolve_redis_url(settings), socket_timeout=5, socket_connect_timeout=5
    )
    try:
        for p in range(settings.partitions):
            keys = Keys(p)
            position = int(client.get(keys.position) or 0)
            landed = int(client.get(keys.landed) or 0)
            if position <= landed:
                continue
            first: list[tuple[bytes, Any]] = client.xrange(  # type: ignore[assignment]
                keys.log, min="-", max="+", count=1
            )
            start = int(first[0][0].split(b"-")[0]) if first else None
            if start is None or start > landed + 1:
                return False, (
                    f"partition {p}: positions {landed + 1}..{position} are not in "
                    f"the log (log starts at {start}): they cannot be landed"
                )
    except (redis.RedisError, OSError) as exc:
        return False, f"Redis unreachable: {exc}"
    finally:
        client.close()
    return True, ""


class AwardsUnreadable(RuntimeError):
    """The served award snapshot answered an error other than not found."""


def _page(served: ServedReads, board: str, cursor: str | None) -> dict[str, Any] | None:
    body = served.awards(board, cursor, AWARDS_PAGE)
    if body is not None and "error" in body:
        raise AwardsUnreadable(f"{board}: {body['error']}: {body.get('detail')}")
    return body


def _read_awards(served: ServedReads, board: str) -> dict[str, Any] | None:
    """Every page of a board's latest award snapshot, or None when there is none."""
    body = _page(served, board, None)
    if body is None:
        return None
    entries = list(body.get("entries", []))
    after = (body.get("cursors") or {}).get("after")
    while after:
        page = _page(served, board, after) or {}
        entries += page.get("entries", [])
        after = (page.get("cursors") or {}).get("after")
    return {**body, "entries": entries}


def verify_awards(
    settings: Settings,
    season_id: str,
    served_reads: ServedReads,
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """Compare each scope's award snapshot with an offline ranking from bronze at the
    award's boundary, tiers from the boards file."""
    if spark is None:
        spark = get_spark("verify-awards")
    config = load_boards(settings.boards_file)
    season = _season(config, season_id)
    boards = season_boards(config, season)
    divergences: list[str] = []
    checked = 0
    awards = {board: _read_awards(served_reads, board) for board in boards}
    events = extract_events(spark, settings)
    for board, award in awards.items():
        if award is None:
            divergences.append(f"{board}: no award snapshot")
            continue
        boundary = {int(p): int(v) for p, v in (award.get("boundary") or {}).items()}
        lateness = config.window_lateness_ms
        _, totals = transform_recompute(
            events,
            boundary,
            config.seasons,
            window_lateness_ms=lateness,
            boards=config,
        )
        achieved = transform_achieved(
            events, boundary, config.seasons, lateness, config
        )
        if achieved is not None:
            totals = totals.join(achieved, ["board", "player_id"], "left")
        unique = [board] if board_order(config, board)[1] else []
        rows = (
            transform_offline_ranks(
                totals.where(F.col("board") == board), unique, asc_boards(config)
            )
            .orderBy("position")
            .collect()
        )
        population = len(rows)
        tier_of = getattr(season, "tier_of", None)
        offline = [
            (
                int(r["rank"]),
                r["player_id"],
                int(r["score"]),
                tier_of(int(r["rank"]), population) if tier_of else None,
            )
            for r in rows
        ]
        served = [
            (e.get("rank"), e.get("playerId"), e.get("score"), e.get("tier"))
            for e in award["entries"]
        ]
        if tier_of is None:
            served = [(r, p, s, None) for r, p, s, _ in served]
        checked += len(served)
        if len(served) != len(offline):
            divergences.append(
                f"{board}: award has {len(served)} entries, offline {len(offline)}"
            )
        for i, (have, want) in enumerate(zip(served, offline, strict=False)):
            if have != want:
                divergences.append(
                    f"{board} award entry {i + 1}: served {have} offline {want}"
                )
    return {
        "season": season_id,
        "checked": checked,
        "divergences": divergences,
    }
