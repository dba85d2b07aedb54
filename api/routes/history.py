"""Why a rank changed: GET /v1/boards/{board}/players/{playerId}/history and
GET /v1/boards/{board}/diff (API.md). Thin: the reads are :mod:`api.history`.

A history read runs on the event loop when everything it needs is built and
kept (the usual read: a few array look-ups); one that must read files (map a
generation's contributions index) or build a pair's arrays first (``WouldBlock``)
runs in the thread pool, off the loop. The diff is a plain (sync) endpoint: the
thread pool."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from api.deps import AuthorizationHeader, PlayerIdPath, viewer_of
from api.direct import DirectRoute
from api.errors import READ_ERROR_RESPONSES
from api.history import HistoryService, WouldBlock
from api.history_models import DiffOut, HistoryOut
from api.reads import is_own_read
from api.responses import EncodedResponse
from serving.orientation import real_body

# DirectRoute (api/direct.py): the history read skips FastAPI's dependency solving
# (the diff, a sync endpoint, keeps FastAPI's handler); api/main.py adds these
# routes ahead of the included routers.
router = APIRouter(
    prefix="/v1/boards",
    tags=["history"],
    responses=READ_ERROR_RESPONSES,
    route_class=DirectRoute,
)


def history_of(request: Request) -> HistoryService:
    return request.app.state.history  # type: ignore[no-any-return]


@router.get("/{board}/players/{player_id}/history", response_model=HistoryOut)
async def read_history(
    request: Request,
    board: str,
    player_id: PlayerIdPath,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    authorization: AuthorizationHeader = None,
) -> EncodedResponse:
    """The player over every retained generation and award snapshot, newest
    first: score, rank, top percent, contributions since the previous entry and
    ``rankChange`` (who moved above or below)."""
    own = is_own_read(viewer_of(request, authorization), player_id)
    service = history_of(request)
    try:
        answer = service.history(board, player_id, limit, own, block=False)
    except WouldBlock:
        answer = await run_in_threadpool(service.history, board, player_id, limit, own)
    body = real_body(service.config(), answer.body) or answer.body
    return EncodedResponse(body, headers=answer.headers)


@router.get("/{board}/diff", response_model=DiffOut)
def read_diff(
    request: Request,
    board: str,
    from_generation: Annotated[str, Query(alias="from", min_length=1, max_length=32)],
    to_generation: Annotated[str, Query(alias="to", min_length=1, max_length=32)],
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> EncodedResponse:
    """Between two retained generations: the largest rank changes, the players
    who entered and left, and their counts; 410 for a generation no longer kept."""
    service = history_of(request)
    answer = service.diff(board, from_generation, to_generation, limit)
    body = real_body(service.config(), answer.body) or answer.body
    return EncodedResponse(body, headers=answer.headers)
