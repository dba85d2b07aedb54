"""Friends: replace a player's friend list (trusted write) and rank a board among the
player and friends (private: needs that player's token)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request

from api.deps import LiveDep, PlayerIdPath, ReadsDep, SettingsDep
from api.errors import READ_ERROR_RESPONSES, WRITE_ERROR_RESPONSES, InvalidRequest
from api.models import FriendsIn, FriendsListOut, FriendsOut, json_body
from api.reads import check_board
from api.responses import EncodedResponse, FastJSONResponse
from api.routes.boards import GenerationQuery, RankingQuery, respond
from api.routes.score_events import _parse_json, read_signed_body
from api.tokens import require_player
from speed.events import EventInvalid, normalize_id
from speed.friends import write_friends

router = APIRouter(prefix="/v1", tags=["friends"])

FriendsMode = Literal["live", "snapshot"]


def _player_id(value: Any, field: str) -> str:
    """A player id by API.md's rule (the one score events use), in NFC."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{field}: must be a string", field=field)
    try:
        return normalize_id(field, value)
    except EventInvalid as exc:
        raise InvalidRequest(str(exc), field=field) from None


def parse_friends(raw: Any, player_id: str, limit: int) -> list[str]:
    """The distinct friend ids of a ``{"friends": [...]}`` body, without the player."""
    if not isinstance(raw, dict) or set(raw) != {"friends"}:
        raise InvalidRequest('body must be {"friends": [...]}', field="friends")
    items = raw["friends"]
    if not isinstance(items, list):
        raise InvalidRequest("friends must be a list", field="friends")
    if len(items) > limit:
        raise InvalidRequest(f"at most {limit} friends", field="friends")
    friends = {_player_id(v, f"friends.{i}") for i, v in enumerate(items)}
    friends.discard(player_id)
    return sorted(friends)


@router.put(
    "/players/{player_id}/friends",
    response_model=FriendsListOut,
    responses=WRITE_ERROR_RESPONSES,
    openapi_extra=json_body(FriendsIn),
)
async def replace_friends(
    player_id: str, request: Request, settings: SettingsDep, live: LiveDep
) -> FastJSONResponse:
    """Replace the player's friend list (signed by a game server)."""
    body = await read_signed_body(request, settings)
    player_id = _player_id(player_id, "playerId")
    friends = parse_friends(_parse_json(body), player_id, settings.max_friends)
    await write_friends(live, player_id, friends)
    return FastJSONResponse({"playerId": player_id, "friends": friends})


@router.get(
    "/boards/{board}/players/{player_id}/friends",
    response_model=FriendsOut,
    responses=READ_ERROR_RESPONSES,
)
async def read_friends_ranking(
    board: str,
    player_id: PlayerIdPath,
    reads: ReadsDep,
    settings: SettingsDep,
    authorization: Annotated[str | None, Header()] = None,
    mode: Annotated[FriendsMode, Query()] = "live",
    generation: GenerationQuery = None,
    ranking: RankingQuery = None,
) -> EncodedResponse:
    """The player and friends ranked among themselves (needs the player's token)."""
    check_board(reads.config, board)
    require_player(authorization, settings.player_token_secret, player_id)
    answer = reads.friends(board, player_id, mode, generation, ranking)
    return respond(await reads.profiled(answer))
