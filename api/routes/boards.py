"""Reads: boards, top, player rank, nearby, entries pages.

Thin routes: they validate input and hand the read to :class:`api.reads.ReadService`,
which picks the mode and answers with encoded bytes; the declared models
(:mod:`api.models`) are what /openapi.json documents. The router's routes are
:class:`api.direct.DirectRoute` ones: the hot reads' endpoints take the ``Request``
(the app's state is ``request.app.state``) and declared parameters, no dependencies.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request

from api.deps import (
    AuthorizationHeader,
    BoardsDep,
    GenerationsDep,
    PlayerIdPath,
    SettingsDep,
    viewer_of,
)
from api.direct import DirectRoute
from api.errors import READ_ERROR_RESPONSES
from api.games import game_of
from api.models import BoardsOut, EntriesOut, NearbyOut, RankOut, TopOut
from api.reads import Answer, ReadService
from api.responses import EncodedResponse, FastJSONResponse
from conf.boards import (
    BoardsConfig,
    board_closes_at,
    board_label,
    describe_board,
    period_end,
    period_start,
    qualify,
    season_cutoffs_ms,
    split_board,
)
from serving.awards import rfc3339, versions
from serving.ranking import Ranking

router = APIRouter(
    prefix="/v1/boards",
    tags=["boards"],
    responses=READ_ERROR_RESPONSES,
    route_class=DirectRoute,
)

Mode = Literal["live", "snapshot", "approx"]
ModeQuery = Annotated[Mode, Query()]
GenerationQuery = Annotated[str | None, Query(max_length=32)]
# API.md "Ranking per query" (default: competition; a rank: unique board's own is
# ordinal); mode=approx answers competition only.
RankingQuery = Annotated[Ranking | None, Query()]


def respond(answer: Answer) -> EncodedResponse:
    return EncodedResponse(answer.body, headers=answer.headers)


def reads_of(request: Request) -> ReadService:
    return request.app.state.reads  # type: ignore[no-any-return]


def _lifecycle(
    config: BoardsConfig, settings_dir: Any, name: str, described: dict[str, str]
) -> dict[str, Any]:
    """state (open / closing / closed), closesAt and, for rolling windows, nextReset.

    A season is ``closing`` from its close time until ``lb season close`` wrote its
    award snapshot; a rolling window has no close command and is ``closed`` at once.
    """
    closes = board_closes_at(config, name)
    now = datetime.now(UTC)
    window = described["window"]
    if closes is None or now <= closes:
        state = "open"
    elif window == "season":
        # A game's seasons' awards live under their qualified ids (arena~S4).
        season = qualify(split_board(name)[0], described["period"])
        state = "closed" if versions(settings_dir, season) else "closing"
    else:
        state = "closed"
    info: dict[str, Any] = {
        "state": state,
        "closesAt": rfc3339(closes) if closes is not None else None,
    }
    if window in ("daily", "weekly", "monthly"):
        end = period_end(window, period_start(window, described["period"]))
        info["nextReset"] = rfc3339(end)
    return info


@router.get("", response_model=BoardsOut)
async def read_boards(
    request: Request,
    config: BoardsDep,
    registry: GenerationsDep,
    settings: SettingsDep,
) -> FastJSONResponse:
    """Boards with window, scope, aggregation, order, tie-break, state, latest
    generation (of the game the path names, api/games.py)."""
    game = game_of(request.scope)
    latest = registry.latest()
    names = set(latest.board_names()) if latest else set()
    names.update(season_cutoffs_ms(config))
    boards = []
    for name in sorted(names):
        if split_board(name)[0] != game:
            continue
        described = describe_board(config, name)
        if described is None:
            continue
        boards.append(
            {
                **board_label(name),
                "window": described["window"],
                "period": described["period"],
                "scope": described["scope"],
                "aggregation": described["aggregation"],
                "order": described["order"],
                "tieBreak": described["tieBreak"],
                "rule": described["rule"],
                **_lifecycle(config, settings.data_dir, name, described),
                "latestGeneration": latest.id
                if latest and name in latest.manifest.get("boards", {})
                else None,
            }
        )
    return FastJSONResponse({"boards": boards})


@router.get("/{board}/top", response_model=TopOut)
async def read_top(
    request: Request,
    board: str,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    mode: ModeQuery = "live",
    generation: GenerationQuery = None,
    ranking: RankingQuery = None,
) -> EncodedResponse:
    """The first ``limit`` display positions (live, or of a generation)."""
    reads = reads_of(request)
    answer = reads.top(board, limit, mode, generation, ranking)
    return respond(await reads.profiled(answer))


@router.get("/{board}/players/{player_id}", response_model=RankOut)
async def read_player_rank(
    request: Request,
    board: str,
    player_id: PlayerIdPath,
    mode: ModeQuery = "live",
    generation: GenerationQuery = None,
    authorization: AuthorizationHeader = None,
    ranking: RankingQuery = None,
) -> EncodedResponse:
    """A player's score, rank, display position and top percent."""
    viewer = viewer_of(request, authorization)
    reads = reads_of(request)
    answer = reads.rank(board, player_id, mode, generation, viewer, ranking)
    return respond(await reads.profiled(answer, (player_id,)))


@router.get("/{board}/players/{player_id}/nearby", response_model=NearbyOut)
async def read_nearby(
    request: Request,
    board: str,
    player_id: PlayerIdPath,
    radius: Annotated[int, Query(ge=0, le=100)] = 5,
    mode: ModeQuery = "live",
    generation: GenerationQuery = None,
    authorization: AuthorizationHeader = None,
    ranking: RankingQuery = None,
) -> EncodedResponse:
    """Up to ``radius`` positions on each side of the player, in display order."""
    viewer = viewer_of(request, authorization)
    reads = reads_of(request)
    answer = reads.nearby(board, player_id, radius, mode, generation, viewer, ranking)
    return respond(await reads.profiled(answer, (player_id,)))


@router.get("/{board}/entries", response_model=EntriesOut)
async def read_entries(
    request: Request,
    board: str,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    generation: GenerationQuery = None,
    ranking: RankingQuery = None,
) -> EncodedResponse:
    """One page in display order; a cursor pins the generation it came from."""
    reads = reads_of(request)
    answer = reads.entries(board, cursor, limit, generation, ranking)
    return respond(await reads.profiled(answer))
