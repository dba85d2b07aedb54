"""Award snapshots of closed seasons: GET /v1/boards/{board}/awards."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query

from api.deps import BoardsDep, SettingsDep
from api.errors import AWARDS_ERROR_RESPONSES, AwardsNotFound, InvalidRequest
from api.models import AwardsOut
from api.responses import FastJSONResponse
from conf.boards import describe_board
from jobs.awards import AwardVersion, read_version

router = APIRouter(prefix="/v1/boards", tags=["awards"])


def _cursor(board: str, version: int, position: int, way: str) -> str:
    raw = orjson.dumps({"b": board, "v": version, "o": position, "d": way})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, board: str) -> dict[str, Any]:
    """A cursor is a position in one immutable award version of one board."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not (
            isinstance(data, dict)
            and data.get("b") == board
            and isinstance(data.get("v"), int)
            and isinstance(data.get("o"), int)
            and data.get("d") in ("after", "before")
        ):
            raise ValueError
        return data
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise InvalidRequest(
            "cursor is malformed or belongs to another board", field="cursor"
        ) from None


def _page(
    version: AwardVersion, board: str, start: int, stop: int
) -> tuple[list[dict[str, Any]], int]:
    table = version.board(board)
    if table is None:
        return [], 0
    population = table.num_rows
    start, stop = max(0, start), min(population, stop)
    rows = table.slice(start, stop - start).to_pylist()
    entries = [
        {
            "position": r["position"],
            "rank": r["rank"],
            "playerId": r["player_id"],
            "score": r["score"],
            "tier": r["tier"],
        }
        for r in rows
    ]
    return entries, population


@router.get(
    "/{board}/awards", response_model=AwardsOut, responses=AWARDS_ERROR_RESPONSES
)
async def read_awards(
    board: str,
    settings: SettingsDep,
    config: BoardsDep,
    version: Annotated[int | None, Query(ge=1)] = None,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> FastJSONResponse:
    """The award snapshot of a closed season's board (latest version by default)."""
    described = describe_board(config, board)
    if described is None or described["window"] != "season":
        raise AwardsNotFound(f"{board!r} is not a season board with awards")
    season_id = described["period"]
    if cursor is not None:
        data = _decode(cursor, board)
        if version is not None and version != data["v"]:
            raise InvalidRequest("cursor belongs to another version", field="cursor")
        version = data["v"]
    found = read_version(settings.data_dir, season_id, version)
    if found is None:
        what = f"version {version} of " if version is not None else ""
        raise AwardsNotFound(f"no {what}award snapshot for season {season_id}")
    if cursor is None:
        start, stop = 0, limit
    elif data["d"] == "after":
        start = data["o"]
        stop = start + limit
    else:
        stop = data["o"] - 1
        start = max(0, stop - limit)
    entries, population = _page(found, board, start, stop)
    first = entries[0]["position"] if entries else None
    last = entries[-1]["position"] if entries else None
    meta = found.meta
    return FastJSONResponse(
        {
            "board": board,
            "season": season_id,
            "version": found.version,
            "generation": meta["generation"],
            "boundary": meta["boundary"],
            "hash": meta["hash"],
            "closedAt": meta["closedAt"],
            "rule": meta["rule"],
            "tieBreak": meta["tieBreak"],
            "population": population,
            "entries": entries,
            "cursors": {
                "before": _cursor(board, found.version, first, "before")
                if first is not None and first > 1
                else None,
                "after": _cursor(board, found.version, last, "after")
                if last is not None and last < population
                else None,
            },
        }
    )
