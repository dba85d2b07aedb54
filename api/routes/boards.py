"""Reads: boards, top, player rank, nearby, entries pages."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query

from api.degraded import (
    REDIS_DOWN,
    degraded_response,
    degraded_row,
    degraded_snapshot,
)
from api.deps import BoardsDep, GenerationsDep, LiveDep, PlayerIdPath, SettingsDep
from api.errors import (
    READ_ERROR_RESPONSES,
    BoardNotFound,
    GenerationExpired,
    GenerationNotFound,
    InvalidRequest,
    NotReady,
    PlayerNotFound,
)
from api.flags import is_shadowed
from api.live import Base, LiveReader, NotExact, PlayerMissing
from api.responses import FastJSONResponse
from conf.boards import (
    BoardsConfig,
    board_closes_at,
    describe_board,
    period_end,
    period_start,
    season_cutoffs_ms,
)
from conf.rule_state import describe_replay_board
from jobs.awards import rfc3339, versions
from serving.registry import (
    Generation,
    GenerationExpiredError,
    GenerationNotFoundError,
    GenerationRegistry,
)
from serving.segments import BoardSegment
from speed.closed import final_boards

router = APIRouter(
    prefix="/v1/boards", tags=["boards"], responses=READ_ERROR_RESPONSES
)

Mode = Literal["live", "snapshot", "approx"]
ModeQuery = Annotated[Mode, Query()]
GenerationQuery = Annotated[str | None, Query(max_length=32)]


def _check_board(config: BoardsConfig, board: str) -> dict[str, str]:
    # A replay's namespace board (season:<S>@<R>:<scope>) reads like a board.
    described = describe_board(config, board) or describe_replay_board(config, board)
    if described is None:
        raise BoardNotFound(f"no board {board!r}")
    return described


def _pin(registry: GenerationRegistry, generation_id: str | None) -> Generation:
    try:
        return registry.get(generation_id)
    except GenerationExpiredError as exc:
        raise GenerationExpired(
            f"generation {exc.generation_id} is no longer retained",
            latestGeneration=exc.latest,
        ) from None
    except GenerationNotFoundError as exc:
        raise GenerationNotFound(str(exc)) from None


def _header(
    board: str, mode: Mode, generation: Generation, population: int
) -> dict[str, Any]:
    """Labels of a snapshot answer: exactly generation ``g``, as of its boundary."""
    return {
        "board": board,
        "mode": mode,
        "exactness": "exact",
        "basis": "snapshot",
        "errorBound": 0,
        "generation": generation.header,
        "asOf": generation.header["boundary"],
        "population": population,
    }


def _snapshot(
    config: BoardsConfig,
    registry: GenerationRegistry,
    board: str,
    generation_id: str | None,
) -> tuple[Generation, BoardSegment | None]:
    _check_board(config, board)
    generation = _pin(registry, generation_id)
    return generation, generation.board(board)


# Cursors are keyset positions on the ordering tuple (score, playerId), pinned to the
# generation they came from; opaque to clients (base64url JSON).
def encode_cursor(
    generation: str,
    board: str,
    score: int,
    player_id: str,
    way: str,
    achieved: int | None = None,
) -> str:
    data: dict[str, Any] = {"g": generation, "b": board, "s": score, "p": player_id}
    data["d"] = way
    if achieved is not None:
        # first_achieved boards: the time is part of the ordering tuple.
        data["t"] = achieved
    raw = orjson.dumps(data)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, board: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = orjson.loads(raw)
        if not (
            isinstance(data, dict)
            and isinstance(data.get("g"), str)
            and data.get("b") == board
            and isinstance(data.get("s"), int)
            and isinstance(data.get("p"), str)
            and data.get("d") in ("after", "before")
            and isinstance(data.get("t", 0), int)
        ):
            raise ValueError
        return data
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise InvalidRequest(
            "cursor is malformed or belongs to another board", field="cursor"
        ) from None


def _cursors(
    generation: Generation,
    board: str,
    segment: BoardSegment | None,
    start: int,
    stop: int,
) -> dict[str, str | None]:
    """Cursors to the page before ``start`` and after ``stop`` (null at either end)."""
    if segment is None:
        return {"before": None, "after": None}
    before = after = None

    def achieved(row: int) -> int | None:
        return None if segment.achieved is None else int(segment.achieved[row])

    if start > 0:
        row = start
        before = encode_cursor(
            generation.id,
            board,
            int(segment.scores[row]),
            segment.players.str_at(row),
            "before",
            achieved(row),
        )
    if stop < segment.population:
        row = stop - 1
        after = encode_cursor(
            generation.id,
            board,
            int(segment.scores[row]),
            segment.players.str_at(row),
            "after",
            achieved(row),
        )
    return {"before": before, "after": after}


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
        state = "closed" if versions(settings_dir, described["period"]) else "closing"
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


@router.get("")
async def read_boards(
    config: BoardsDep, registry: GenerationsDep, settings: SettingsDep
) -> FastJSONResponse:
    """Boards with window, scope, aggregation, tie-break, state, latest generation."""
    latest = registry.latest()
    names = set(latest.board_names()) if latest else set()
    names.update(season_cutoffs_ms(config))
    boards = []
    for name in sorted(names):
        described = describe_board(config, name)
        if described is None:
            continue
        boards.append(
            {
                "board": name,
                "window": described["window"],
                "period": described["period"],
                "scope": described["scope"],
                "aggregation": described["aggregation"],
                "tieBreak": described["tieBreak"],
                "rule": described["rule"],
                **_lifecycle(config, settings.data_dir, name, described),
                "latestGeneration": latest.id
                if latest and name in latest.manifest.get("boards", {})
                else None,
            }
        )
    return FastJSONResponse({"boards": boards})


_FINAL: dict[str, set[str]] = {}


def _final_in_latest(
    config: BoardsConfig, registry: GenerationRegistry, board: str
) -> bool:
    """True when the latest generation holds the board's final state: its speed-layer
    keys are gone (speed/closed.py) and the generation answers exactly."""
    latest = registry.latest()
    if latest is None:
        return False
    # Keyed by the generation's directory: generation ids repeat across data dirs
    # (several apps in one process, as in the tests).
    key = str(latest.directory)
    final = _FINAL.get(key)
    if final is None:
        if len(_FINAL) > 16:
            _FINAL.clear()
        final = _FINAL[key] = final_boards(config, latest.manifest)
    return board in final


def _public(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Live entries without the internal keyset time of first_achieved boards."""
    return [{k: v for k, v in e.items() if k != "_t"} for e in entries]


def _player_row(
    gen: Generation, segment: BoardSegment | None, board: str, player_id: str
) -> tuple[BoardSegment, int]:
    """The player's display row in a generation; PlayerNotFound when absent."""
    row = segment.row_of(player_id) if segment else None
    if segment is None or row is None:
        raise PlayerNotFound(f"player {player_id!r} is not on {board} in {gen.id}")
    return segment, row


def _live_header(
    board: str, mode: Mode, base: Base, as_of: dict[str, int], population: int
) -> dict[str, Any]:
    """Labels of a live answer: base generation merged with every event up to asOf."""
    return {
        "board": board,
        "mode": mode,
        "exactness": "exact",
        "basis": "live",
        "errorBound": 0,
        "generation": base.generation.header if base.generation else None,
        "asOf": as_of,
        "population": population,
    }


def _wants_snapshot(mode: Mode, generation: str | None) -> bool:
    return mode == "snapshot" or generation is not None


def _closed_snapshot(
    config: BoardsConfig,
    registry: GenerationRegistry,
    board: str,
    mode: Mode,
    generation: str | None,
) -> bool:
    """Read a closed board's final generation instead of the speed layer."""
    return not _wants_snapshot(mode, generation) and _final_in_latest(
        config, registry, board
    )


def _snapshot_fallback(
    config: BoardsConfig, registry: GenerationRegistry, board: str
) -> tuple[Generation, BoardSegment | None]:
    """When exactness is impossible live: the latest generation, labelled snapshot."""
    try:
        return _snapshot(config, registry, board, None)
    except GenerationNotFound:
        raise NotReady("a rebase is in progress; retry shortly") from None


@router.get("/{board}/top")
async def read_top(
    board: str,
    config: BoardsDep,
    registry: GenerationsDep,
    live: LiveDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    mode: ModeQuery = "live",
    generation: GenerationQuery = None,
) -> FastJSONResponse:
    """The first ``limit`` display positions (live, or of a generation)."""
    _check_board(config, board)
    if _closed_snapshot(config, registry, board, mode, generation):
        gen, segment = _snapshot(config, registry, board, None)
    elif not _wants_snapshot(mode, generation):
        # The histogram orders buckets, not players: a top list is always read live.
        try:
            result = await live.top(board, limit)
        except NotExact:
            pass
        except REDIS_DOWN:
            gen, segment = degraded_snapshot(config, registry, board, "top")
            population = segment.population if segment else 0
            entries = segment.entries(0, limit) if segment else []
            return degraded_response(
                {**_header(board, mode, gen, population), "entries": entries}
            )
        else:
            header = _live_header(
                board, mode, result["base"], result["asOf"], result["population"]
            )
            return FastJSONResponse({**header, "entries": _public(result["entries"])})
        gen, segment = _snapshot_fallback(config, registry, board)
    else:
        gen, segment = _snapshot(config, registry, board, generation)
    population = segment.population if segment else 0
    entries = segment.entries(0, limit) if segment else []
    return FastJSONResponse(
        {**_header(board, mode, gen, population), "entries": entries}
    )


async def _approx_answer(
    live: LiveReader,
    registry: GenerationRegistry,
    board: str,
    player_id: str,
    mode: Mode,
) -> dict[str, Any]:
    result = await live.approx_rank(board, player_id)
    latest = registry.latest()
    population = max(1, result["population"])
    return {
        "board": board,
        "mode": mode,
        "exactness": "approximate",
        "basis": "histogram",
        "errorBound": result["errorBound"],
        "generation": latest.header if latest else None,
        "asOf": result["asOf"],
        "population": result["population"],
        "playerId": player_id,
        "score": result["score"],
        "rank": result["rank"],
        "topPercent": round(100 * result["rank"] / population, 6),
    }


@router.get("/{board}/players/{player_id}")
async def read_player_rank(
    board: str,
    player_id: PlayerIdPath,
    config: BoardsDep,
    registry: GenerationsDep,
    live: LiveDep,
    mode: ModeQuery = "live",
    generation: GenerationQuery = None,
) -> FastJSONResponse:
    """A player's score, competition rank, display position and top percent."""
    _check_board(config, board)
    if not _wants_snapshot(mode, generation) and not _final_in_latest(
        config, registry, board
    ):
        try:
            if mode == "approx":
                return FastJSONResponse(
                    await _approx_answer(live, registry, board, player_id, mode)
                )
            result = await live.rank(board, player_id)
        except PlayerMissing:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}") from None
        except NotExact:
            return FastJSONResponse(
                await _approx_answer(live, registry, board, player_id, mode)
            )
        except REDIS_DOWN:
            gen, segment = degraded_snapshot(config, registry, board, "rank")
            segment, row = degraded_row(gen, segment, player_id)
            entry = segment.entry(row)
            return degraded_response(
                {
                    **_header(board, mode, gen, segment.population),
                    "playerId": player_id,
                    "score": entry["score"],
                    "rank": entry["rank"],
                    "position": entry["position"],
                    "topPercent": round(100 * entry["rank"] / segment.population, 6),
                }
            )
        if await is_shadowed(live.speed, player_id):
            # A shadowed player's own read answers as if present: count it back in.
            result["population"] += 1
        header = _live_header(
            board, mode, result["base"], result["asOf"], result["population"]
        )
        return FastJSONResponse(
            {
                **header,
                "playerId": player_id,
                "score": result["score"],
                "rank": result["rank"],
                "position": result["position"],
                "topPercent": round(100 * result["rank"] / result["population"], 6),
            }
        )
    gen, segment = _snapshot(config, registry, board, generation)
    if segment is not None and player_id in segment.hidden:
        # Shadowed in this generation: its own read answers as if it were present.
        score = segment.hidden[player_id]
        rank = segment.count_above(score) + 1
        population = segment.population + 1
        return FastJSONResponse(
            {
                **_header(board, mode, gen, population),
                "playerId": player_id,
                "score": score,
                "rank": rank,
                "position": segment.first_row_at_or_after(score, player_id) + 1,
                "topPercent": round(100 * rank / population, 6),
            }
        )
    segment, row = _player_row(gen, segment, board, player_id)
    entry = segment.entry(row)
    return FastJSONResponse(
        {
            **_header(board, mode, gen, segment.population),
            "playerId": player_id,
            "score": entry["score"],
            "rank": entry["rank"],
            "position": entry["position"],
            "topPercent": round(100 * entry["rank"] / segment.population, 6),
        }
    )


def _live_cursors(
    base: Base, board: str, entries: list[dict[str, Any]], population: int
) -> dict[str, str | None]:
    """Cursors from a live window into the base generation's pages (or null)."""
    if base.generation is None or not entries:
        return {"before": None, "after": None}
    first, last = entries[0], entries[-1]
    return {
        "before": None
        if first["position"] <= 1
        else encode_cursor(
            base.generation.id,
            board,
            first["score"],
            first["playerId"],
            "before",
            first.get("_t"),
        ),
        "after": None
        if last["position"] >= population
        else encode_cursor(
            base.generation.id,
            board,
            last["score"],
            last["playerId"],
            "after",
            last.get("_t"),
        ),
    }


@router.get("/{board}/players/{player_id}/nearby")
async def read_nearby(
    board: str,
    player_id: PlayerIdPath,
    config: BoardsDep,
    registry: GenerationsDep,
    live: LiveDep,
    radius: Annotated[int, Query(ge=0, le=100)] = 5,
    mode: ModeQuery = "live",
    generation: GenerationQuery = None,
) -> FastJSONResponse:
    """Up to ``radius`` positions on each side of the player, in display order."""
    _check_board(config, board)
    if _closed_snapshot(config, registry, board, mode, generation):
        gen, segment = _snapshot(config, registry, board, None)
    elif not _wants_snapshot(mode, generation):
        try:
            result = await live.nearby(board, player_id, radius)
        except PlayerMissing:
            raise PlayerNotFound(f"player {player_id!r} is not on {board}") from None
        except NotExact:
            gen, segment = _snapshot_fallback(config, registry, board)
        except REDIS_DOWN:
            gen, segment = degraded_snapshot(config, registry, board, "nearby")
            segment, row = degraded_row(gen, segment, player_id)
            start = max(0, row - radius)
            stop = min(segment.population, row + radius + 1)
            return degraded_response(
                {
                    **_header(board, mode, gen, segment.population),
                    "playerId": player_id,
                    "entries": segment.entries(start, stop),
                    "cursors": _cursors(gen, board, segment, start, stop),
                }
            )
        else:
            header = _live_header(
                board, mode, result["base"], result["asOf"], result["population"]
            )
            return FastJSONResponse(
                {
                    **header,
                    "playerId": player_id,
                    "entries": _public(result["entries"]),
                    "cursors": _live_cursors(
                        result["base"], board, result["entries"], result["population"]
                    ),
                }
            )
    else:
        gen, segment = _snapshot(config, registry, board, generation)
    segment, row = _player_row(gen, segment, board, player_id)
    start, stop = max(0, row - radius), min(segment.population, row + radius + 1)
    return FastJSONResponse(
        {
            **_header(board, mode, gen, segment.population),
            "playerId": player_id,
            "entries": segment.entries(start, stop),
            "cursors": _cursors(gen, board, segment, start, stop),
        }
    )


@router.get("/{board}/entries")
async def read_entries(
    board: str,
    config: BoardsDep,
    registry: GenerationsDep,
    cursor: Annotated[str | None, Query(max_length=2048)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    generation: GenerationQuery = None,
) -> FastJSONResponse:
    """One page in display order; a cursor pins the generation it came from."""
    _check_board(config, board)
    if cursor is not None:
        data = decode_cursor(cursor, board)
        if generation is not None and generation != data["g"]:
            raise InvalidRequest("cursor belongs to another generation", field="cursor")
        gen = _pin(registry, data["g"])
    else:
        gen = _pin(registry, generation)
    segment = gen.board(board)
    population = segment.population if segment else 0
    if segment is None:
        start = stop = 0
    elif cursor is None:
        start, stop = 0, min(limit, population)
    elif data["d"] == "after":
        start = segment.first_row_after(data["s"], data["p"], data.get("t"))
        stop = min(population, start + limit)
    else:
        stop = segment.first_row_at_or_after(data["s"], data["p"], data.get("t"))
        start = max(0, stop - limit)
    entries = segment.entries(start, stop) if segment else []
    return FastJSONResponse(
        {
            **_header(board, "snapshot", gen, population),
            "entries": entries,
            "cursors": _cursors(gen, board, segment, start, stop),
        }
    )
