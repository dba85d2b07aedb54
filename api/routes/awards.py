"""Award snapshots of closed seasons: GET /v1/boards/{board}/awards."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import ReadsDep
from api.errors import AWARDS_ERROR_RESPONSES
from api.models import AwardsOut
from api.responses import EncodedResponse
from api.routes.boards import respond

router = APIRouter(prefix="/v1/boards", tags=["awards"])


@router.get(
    "/{board}/awards", response_model=AwardsOut, responses=AWARDS_ERROR_RESPONSES
)
async def read_awards(
    board: str,
    reads: ReadsDep,
    version: Annotated[int | None, Query(ge=1)] = None,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> EncodedResponse:
    """The award snapshot of a closed season's board (latest version by default)."""
    return respond(await reads.profiled(reads.awards(board, version, cursor, limit)))
