"""Admin calls of the season lifecycle: late review and adjudications."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from api.deps import AdminDep, BoardsDep, SettingsDep, SpeedDep
from api.errors import (
    ADMIN_ERROR_RESPONSES,
    AdjudicationClash,
    GameNotFound,
    InvalidRequest,
    SeasonNotClosed,
    SeasonNotFound,
)
from api.models import AdjudicationOut, LateReviewOut, json_body
from api.responses import FastJSONResponse
from conf.boards import DEFAULT_GAME, BoardsConfig, Season, qualify, resolve_season
from conf.settings import Settings
from serving.awards import (
    AdjudicationConflict,
    AdjudicationInvalid,
    decided_events,
    read_version,
)
from speed.audit import record_audit
from speed.late_review import adjudicate as adjudicate_awards
from speed.late_review import late_item, late_review_key, pending_late
from speed.logs import log_records
from speed.store import SpeedLayer

router = APIRouter(prefix="/v1/admin", tags=["admin"])


class AdjudicationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accept: list[str] = Field(default_factory=list, max_length=10_000)
    reject: list[str] = Field(default_factory=list, max_length=10_000)
    reason: str = Field(min_length=1, max_length=1024)


# API.md "Games": an admin path names no game; ``?game=`` picks another game's season.
GameQuery = Annotated[str, Query(max_length=32)]


def _season(config: BoardsConfig, season_id: str, game: str = DEFAULT_GAME) -> Season:
    """The season, by its internal id (``<game>~S4`` for another game's)."""
    if config.game(game) is None:
        raise GameNotFound(f"no game {game!r}")
    season = resolve_season(config, qualify(game, season_id))
    if season is None:
        raise SeasonNotFound(f"no season {season_id!r}")
    return season


async def _late_records(
    speed: SpeedLayer, settings: Settings, season_id: str
) -> list[Any]:
    """Log tails first, then the landed queue (landing queues before trimming)."""
    records = await log_records(speed.client, settings.partitions)
    queued = await speed.client.hgetall(late_review_key(season_id))
    records += [orjson.loads(raw) for raw in queued.values()]
    decided = decided_events(settings.data_dir, season_id)
    return pending_late(records, season_id, decided)


@router.get(
    "/seasons/{season_id}/late-review",
    response_model=LateReviewOut,
    responses=ADMIN_ERROR_RESPONSES,
)
async def read_late_review(
    season_id: str,
    admin: AdminDep,
    settings: SettingsDep,
    config: BoardsDep,
    speed: SpeedDep,
    game: GameQuery = DEFAULT_GAME,
) -> FastJSONResponse:
    """Events held after the season's cutoff and not adjudicated yet."""
    season = _season(config, season_id, game)
    records = await _late_records(speed, settings, season.id)
    return FastJSONResponse({"events": [late_item(r) for r in records]})


@router.post(
    "/seasons/{season_id}/adjudications",
    response_model=AdjudicationOut,
    responses=ADMIN_ERROR_RESPONSES,
    openapi_extra=json_body(AdjudicationIn),
)
async def create_adjudication(
    season_id: str,
    admin: AdminDep,
    settings: SettingsDep,
    config: BoardsDep,
    speed: SpeedDep,
    game: GameQuery = DEFAULT_GAME,
) -> FastJSONResponse:
    """Accept or reject late events: award version N + 1 with its changes."""
    season = _season(config, season_id, game)
    try:
        body = AdjudicationIn.model_validate(orjson.loads(admin.body or b"{}"))
    except (ValidationError, orjson.JSONDecodeError) as exc:
        raise InvalidRequest(f"body: {exc}".splitlines()[0], field="body") from None
    if read_version(settings.data_dir, season.id) is None:
        raise SeasonNotClosed(f"season {season.id} has no award snapshot yet")
    records = await _late_records(speed, settings, season.id)
    try:
        version = await run_in_threadpool(
            adjudicate_awards,
            settings.data_dir,
            config,
            season,
            records,
            body.accept,
            body.reject,
            body.reason,
            admin.actor,
        )
    except AdjudicationInvalid as exc:
        raise InvalidRequest(str(exc), field="accept") from None
    except AdjudicationConflict as exc:
        raise AdjudicationClash(str(exc)) from None
    changes = version.meta.get("changes") or []
    await record_audit(
        speed.client,
        admin.actor,
        "adjudication",
        f"season:{season.id}",
        body.reason,
        {
            "version": version.version,
            "accept": sorted(body.accept),
            "reject": sorted(body.reject),
            "hash": version.hash,
            "changes": len(changes),
        },
    )
    return FastJSONResponse(
        {
            "season": season_id,
            "version": version.version,
            "hash": version.hash,
            "changes": changes,
        }
    )
