"""Cursors: keyset positions in a generation (entries, nearby) or an award version."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from api.errors import (
    InvalidRequest,
)
from serving.registry import (
    Generation,
)
from serving.segments import BoardSegment
from speed.live import (
    Base,
)


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
    return base64.urlsafe_b64encode(orjson.dumps(data)).decode().rstrip("=")


CURSOR_FIELDS = frozenset(("g", "b", "s", "p", "d", "t"))


def decode_cursor(cursor: str, board: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = orjson.loads(raw)
        if not (
            isinstance(data, dict)
            # Only the fields encode_cursor writes: a cursor padded with others
            # would be a distinct cache key for the same page (snapshot.py caches).
            and data.keys() <= CURSOR_FIELDS
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


def segment_cursors(
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
        before = encode_cursor(
            generation.id,
            board,
            int(segment.scores[start]),
            segment.players.str_at(start),
            "before",
            achieved(start),
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


def live_cursors(
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


def award_cursor(board: str, version: int, position: int, way: str) -> str:
    raw = orjson.dumps({"b": board, "v": version, "o": position, "d": way})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


AWARD_CURSOR_FIELDS = frozenset(("b", "v", "o", "d"))


def decode_award_cursor(cursor: str, board: str) -> dict[str, Any]:
    """A cursor is a position in one immutable award version of one board."""
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not (
            isinstance(data, dict)
            and data.keys() <= AWARD_CURSOR_FIELDS
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
