"""Admin: quarantine review (GET /v1/admin/quarantine, POST .../{eventId}), audited.

Per game (API.md "Games"): the list names each held event's game (``?game=``
lists one game's); a decision is about the game ``?game=`` names (default
``default``), so the same ids held in two games are two events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.deps import AdminDep, BoardsDep, SpeedDep
from api.errors import ADMIN_ERROR_RESPONSES, ApiError, GameNotFound, InvalidRequest
from api.models import DecisionOut, HeldEventsOut, json_body
from api.responses import FastJSONResponse
from api.routes.score_events import _parse_json, shown
from conf.boards import DEFAULT_GAME, BoardsConfig
from speed.audit import record_audit
from speed.quarantine import HeldAmbiguous, HeldNotFound, find_held, list_held
from speed.quarantine import reject as reject_held
from speed.quarantine import release as release_held

router = APIRouter(prefix="/v1/admin/quarantine", tags=["admin"])


def _known(config: BoardsConfig, game: str) -> str:
    if config.game(game) is None:
        raise GameNotFound(f"no game {game!r}")
    return game


class EventNotHeld(ApiError):
    status, code = 404, "event_not_found"


class EventIdAmbiguous(ApiError):
    status, code = 409, "ambiguous_event"


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["release", "reject"]
    reason: str = Field(min_length=1, max_length=1024)
    # Needed only when several players used the same event id.
    playerId: str | None = Field(default=None, min_length=1, max_length=256)


def _decision(raw: Any) -> DecisionIn:
    try:
        return DecisionIn.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidRequest(f"{field}: {first['msg']}", field=field) from None


@router.get("", response_model=HeldEventsOut, responses=ADMIN_ERROR_RESPONSES)
async def read_quarantine(
    admin: AdminDep,
    speed: SpeedDep,
    config: BoardsDep,
    game: Annotated[str | None, Query(max_length=32)] = None,
) -> FastJSONResponse:
    """Events held as quarantined (of every game, or of ``game``), oldest first."""
    if game is not None:
        _known(config, game)
    return FastJSONResponse({"events": await list_held(speed, game)})


@router.post(
    "/{event_id}",
    response_model=DecisionOut,
    responses=ADMIN_ERROR_RESPONSES,
    openapi_extra=json_body(DecisionIn),
)
async def decide_quarantine(
    event_id: str,
    admin: AdminDep,
    speed: SpeedDep,
    config: BoardsDep,
    game: Annotated[str, Query(max_length=32)] = DEFAULT_GAME,
) -> FastJSONResponse:
    """Release a held event of ``game`` (applied once, as of its acceptance) or
    reject it."""
    body = _decision(_parse_json(admin.body))
    _known(config, game)
    try:
        record = await find_held(speed, event_id, body.playerId, game)
    except HeldNotFound as exc:
        raise EventNotHeld(str(exc)) from None
    except HeldAmbiguous as exc:
        raise EventIdAmbiguous(str(exc)) from None
    player = record["event"]["playerId"]
    if body.action == "release":
        outcome = await release_held(speed, record)
        if outcome.body is None:
            raise EventNotHeld(str(outcome.error))
        # Its boards named as the game's clients name them (as a write's answer).
        result = shown(outcome.body, game)
        status = result["status"]
    else:
        if not await reject_held(speed, record):
            raise EventNotHeld(f"event {event_id!r} is no longer held")
        status = "rejected"
        result = {"eventId": event_id, "playerId": player, "status": status}
    if status == "noop":
        raise EventNotHeld(f"event {event_id!r} is no longer held")
    await record_audit(
        speed.client,
        admin.actor,
        f"quarantine.{body.action}",
        event_id,
        body.reason,
        {
            "playerId": player,
            "game": game,
            "outcome": status,
            "position": record["position"],
            "partition": record["partition"],
        },
    )
    return FastJSONResponse({"decision": body.action, "result": result})
