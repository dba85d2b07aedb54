"""Friends: replace a player's friend list (trusted write) and rank a board among the
player and friends (private: needs that player's token)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request

from api.deps import BoardsDep, FriendsDep, GenerationsDep, LiveDep, SettingsDep
from api.errors import InvalidRequest, PlayerNotFound
from api.flags import shadowed_among
from api.friends import (
    NotExact,
    rank_members,
    read_friends,
    snapshot_scores,
    write_friends,
)
from api.responses import FastJSONResponse
from api.routes.boards import (
    GenerationQuery,
    _check_board,
    _header,
    _live_header,
    _snapshot,
    _snapshot_fallback,
)
from api.routes.score_events import _parse_json, read_signed_body
from api.tokens import require_player
from speed.events import EventInvalid, normalize_id

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


@router.put("/players/{player_id}/friends")
async def replace_friends(
    player_id: str, request: Request, settings: SettingsDep, live: LiveDep
) -> FastJSONResponse:
    """Replace the player's friend list (signed by a game server)."""
    body = await read_signed_body(request, settings)
    player_id = _player_id(player_id, "playerId")
    friends = parse_friends(_parse_json(body), player_id, settings.max_friends)
    await write_friends(live, player_id, friends)
    return FastJSONResponse({"playerId": player_id, "friends": friends})


@router.get("/boards/{board}/players/{player_id}/friends")
async def read_friends_ranking(
    board: str,
    player_id: str,
    config: BoardsDep,
    registry: GenerationsDep,
    live: LiveDep,
    reader: FriendsDep,
    settings: SettingsDep,
    authorization: Annotated[str | None, Header()] = None,
    mode: Annotated[FriendsMode, Query()] = "live",
    generation: GenerationQuery = None,
) -> FastJSONResponse:
    """The player and friends ranked among themselves (needs the player's token)."""
    _check_board(config, board)
    require_player(authorization, settings.player_token_secret, player_id)
    friends = await read_friends(live, player_id)
    # Shadowed friends are hidden like everywhere public; the player sees itself.
    hidden = await shadowed_among(live.speed, friends)
    members = [player_id, *(f for f in friends if f not in hidden)]
    header: dict[str, Any] | None = None
    if mode == "live" and generation is None:
        try:
            scores, base, as_of = await reader.live_scores(board, members)
        except NotExact:
            gen, segment = _snapshot_fallback(config, registry, board)
            scores = snapshot_scores(segment, members)
            header = _header(board, mode, gen, len(scores))
        else:
            header = _live_header(board, mode, base, as_of, len(scores))
    else:
        gen, segment = _snapshot(config, registry, board, generation)
        scores = snapshot_scores(segment, members)
        header = _header(board, mode, gen, len(scores))
    if player_id not in scores:
        raise PlayerNotFound(f"player {player_id!r} is not on {board}")
    return FastJSONResponse(
        {**header, "playerId": player_id, "entries": rank_members(scores)}
    )
