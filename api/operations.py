"""The operational state of a data dir: what ``lb status`` shows and ``/metrics``
exports as gauges.

Everything here is read from shared state (Redis, the published generations, the last
verify result, the boards file), never from one process's memory, so any API worker
answers a scrape with the same values.

* backlog of a partition: positions handed out but not landed (``pos - landed``);
* oldest unlanded event: age of the first log entry after ``landed``;
* generation lag: positions after the latest generation's boundary, and the age of the
  first of them still in the log (a lower bound while a publish is landing them);
* changed players per board: members of the changed-sets (live side), all partitions.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis

from conf.boards import BoardsConfig, game_seasons, qualify, resolve_season
from conf.settings import Settings
from serving.awards import versions
from serving.registry import GenerationRegistry
from serving.verify_state import read_last_verify
from speed.logs import changed_players, first_received_after, progress

SEASON_STATES = ("open", "closing", "closed")


@dataclass
class PartitionState:
    partition: int
    position: int
    landed: int
    backlog: int
    oldest_unlanded_age_seconds: float | None
    base_generation: int
    generation_lag_positions: int
    generation_lag_seconds: float | None


@dataclass
class OpsState:
    now: str
    redis_error: str | None = None
    generation: dict[str, Any] | None = None
    partitions: list[PartitionState] = field(default_factory=list)
    changed_players: dict[str, int] = field(default_factory=dict)
    seasons: list[dict[str, Any]] = field(default_factory=list)
    last_verify: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def season_states(
    config: BoardsConfig, now: datetime, closed: set[str]
) -> list[dict[str, Any]]:
    """open until the cutoff (end + allowedLateness), then closing until closed."""
    out = []
    # Another game's season is named by its internal id (<game>~S4).
    for season in (
        resolve_season(config, qualify(g, s.id)) or s for g, s in game_seasons(config)
    ):
        if season.id in closed:
            state = "closed"
        elif now >= season.cutoff:
            state = "closing"
        else:
            state = "open"
        out.append(
            {"season": season.id, "state": state, "closesAt": season.cutoff.isoformat()}
        )
    return out


def closed_seasons(settings: Settings, config: BoardsConfig) -> set[str]:
    """Seasons with an award snapshot (version 1 or later), read from the award
    files (:mod:`serving.awards`)."""
    return {
        qualify(g, s.id)
        for g, s in game_seasons(config)
        if versions(settings.data_dir, qualify(g, s.id))
    }


def collect_state(
    settings: Settings,
    client: redis.Redis | None,
    registry: GenerationRegistry,
    config: BoardsConfig,
) -> OpsState:
    """Read the whole operational state; Redis failures are reported, not raised
    (``client`` None: no Redis is running, e.g. a stopped stack)."""
    now = datetime.now(UTC)
    now_ms = time.time() * 1000
    state = OpsState(now=now.isoformat())
    generation = registry.latest()
    boundary: dict[str, int] = {}
    if generation is not None:
        published = _parse_time(generation.header.get("publishedAt"))
        boundary = generation.boundary
        state.generation = {
            "id": generation.id,
            "publishedAt": generation.header.get("publishedAt"),
            "ageSeconds": (now - published).total_seconds() if published else None,
            "boundary": boundary,
        }
    state.seasons = season_states(config, now, closed_seasons(settings, config))
    state.last_verify = read_last_verify(settings)
    if client is None:
        state.redis_error = "not running"
        return state
    try:
        for p, each in enumerate(progress(client, settings.partitions)):
            position, landed, base = each.position, each.landed, each.base_generation
            oldest = (
                first_received_after(client, p, landed) if position > landed else None
            )
            through = int(boundary.get(str(p), 0))
            lagging = (
                first_received_after(client, p, through) if position > through else None
            )
            state.partitions.append(
                PartitionState(
                    p,
                    position,
                    landed,
                    max(0, position - landed),
                    None if oldest is None else max(0.0, (now_ms - oldest) / 1000),
                    base,
                    max(0, position - through),
                    None if lagging is None else max(0.0, (now_ms - lagging) / 1000),
                )
            )
        state.changed_players = changed_players(client)
    except (redis.RedisError, OSError) as exc:
        state.redis_error = str(exc) or type(exc).__name__
    return state
