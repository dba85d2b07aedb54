"""A board's score distribution: the equi-depth bucket counts of a generation."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import BoardsDep, GenerationsDep
from api.errors import ErrorOut
from api.reads import check_board, pin
from api.routes.boards import GenerationQuery
from conf.boards import board_rules
from serving.orientation import real_buckets

router = APIRouter(prefix="/v1/boards", tags=["boards"])


class GenerationOut(BaseModel):
    id: str
    publishedAt: str | None
    boundary: dict[str, int]
    complete: bool


class BucketOut(BaseModel):
    lower: int = Field(description="lowest score in the bucket (inclusive)")
    upper: int | None = Field(
        description="the next bucket's lower bound (exclusive); null for the last"
    )
    count: int = Field(description="players whose score lies in [lower, upper)")


class HistogramOut(BaseModel):
    """Bucket counts of one published generation (exact for that generation)."""

    board: str
    mode: Literal["snapshot"] = "snapshot"
    exactness: Literal["exact"] = "exact"
    basis: Literal["snapshot"] = Field(
        default="snapshot",
        description="the counts are exactly generation `generation`'s",
    )
    errorBound: int = 0
    generation: GenerationOut
    asOf: dict[str, int]
    population: int
    maxScore: int | None = Field(
        description="the highest score (the last bucket's inclusive top); null when "
        "the board is empty"
    )
    buckets: list[BucketOut] = Field(description="ascending by score")


@router.get(
    "/{board}/histogram",
    response_model=HistogramOut,
    responses={
        404: {
            "model": ErrorOut,
            "description": "board_not_found, or generation_not_found (none yet)",
        },
        410: {
            "model": ErrorOut,
            "description": "generation_expired (a pinned generation)",
        },
    },
)
async def read_histogram(
    board: str,
    config: BoardsDep,
    registry: GenerationsDep,
    generation: GenerationQuery = None,
) -> HistogramOut:
    """The score distribution of a generation (latest unless pinned), as the
    equi-depth buckets the approximate ranks use."""
    check_board(config, board)
    gen = pin(registry, generation)
    segment = gen.board(board)
    sign = board_rules(config, board).sign
    buckets: list[BucketOut] = []
    if segment is not None:
        lowers = [int(v) for v in segment.bucket_lowers]
        counts = [int(v) for v in segment.bucket_counts]
        # A segment without a buckets file (the reader allows it) has no buckets.
        # Buckets are over oriented scores: real_buckets turns them into real ones.
        top = int(segment.scores[0]) if segment.population else None
        buckets = [
            BucketOut(lower=lo, upper=up, count=n)
            for lo, up, n in real_buckets(lowers, counts, top, sign)
        ]
    header = gen.header
    return HistogramOut(
        board=board,
        generation=GenerationOut(**header),
        asOf=gen.boundary,
        population=segment.population if segment else 0,
        # The highest real score: the best one on desc boards, the worst on asc.
        maxScore=(
            (int(segment.scores[0]) if sign == 1 else -int(segment.scores[-1]))
            if segment and segment.population
            else None
        ),
        buckets=buckets,
    )
