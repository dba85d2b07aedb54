"""Profiles: replace a player's display name and country (trusted write).

The profile store and its rules are :mod:`speed.profiles`; the read service attaches
profiles to the ranked entries of its answers (:meth:`api.reads.ReadService.profiled`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.deps import LiveDep, ReadsDep, SettingsDep
from api.errors import WRITE_ERROR_RESPONSES, InvalidRequest
from api.models import ProfileIn, ProfileOut, json_body
from api.responses import FastJSONResponse
from api.routes.friends import _player_id
from api.routes.score_events import _parse_json, read_signed_body
from speed.profiles import ProfileInvalid, parse_profile, write_profile

router = APIRouter(prefix="/v1", tags=["profiles"])


@router.put(
    "/players/{player_id}/profile",
    response_model=ProfileOut,
    responses=WRITE_ERROR_RESPONSES,
    openapi_extra=json_body(ProfileIn),
)
async def replace_profile(
    player_id: str,
    request: Request,
    settings: SettingsDep,
    live: LiveDep,
    reads: ReadsDep,
) -> FastJSONResponse:
    """Replace the player's profile (signed by a game server); an absent or null
    field is unset."""
    body = await read_signed_body(request, settings)
    player_id = _player_id(player_id, "playerId")
    try:
        profile = parse_profile(_parse_json(body))
    except ProfileInvalid as exc:
        raise InvalidRequest(str(exc), field=exc.field) from None
    await write_profile(live.speed.client, player_id, profile)
    # This process's readers see it now; the others on the watch's message.
    reads.profile_cache.changed()
    return FastJSONResponse({"playerId": player_id, **profile})
