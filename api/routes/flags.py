"""Admin: shadow removal flags (POST /v1/admin/players/{playerId}/flags), audited."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.deps import AdminDep, GenerationsDep, SpeedDep
from api.errors import ADMIN_ERROR_RESPONSES, InvalidRequest, NotReady
from api.models import FlagOut, json_body
from api.responses import FastJSONResponse
from api.routes.friends import _player_id
from api.routes.score_events import _parse_json
from speed.audit import record_audit
from speed.flags import FlagRetry, set_flag

router = APIRouter(prefix="/v1/admin", tags=["admin"])


class FlagIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["shadow", "restore"]
    reason: str = Field(min_length=1, max_length=1024)


def _flag_body(raw: Any) -> FlagIn:
    try:
        return FlagIn.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidRequest(f"{field}: {first['msg']}", field=field) from None


@router.post(
    "/players/{player_id}/flags",
    response_model=FlagOut,
    responses=ADMIN_ERROR_RESPONSES,
    openapi_extra=json_body(FlagIn),
)
async def flag_player(
    player_id: str, admin: AdminDep, speed: SpeedDep, registry: GenerationsDep
) -> FastJSONResponse:
    """Shadow a player (hidden from every public answer) or restore it."""
    player_id = _player_id(player_id, "playerId")
    body = _flag_body(_parse_json(admin.body))
    try:
        result = await set_flag(speed, registry, player_id, body.action)
    except FlagRetry as exc:
        raise NotReady(str(exc)) from None
    await record_audit(
        speed.client,
        admin.actor,
        f"flag.{body.action}",
        player_id,
        body.reason,
        {"changed": result["changed"], "boards": result["boards"]},
    )
    return FastJSONResponse(result)
