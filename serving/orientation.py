"""Score out: the real scores of an answer built from oriented scores.

Every sorted structure keeps a board's *oriented* score (conf/boards.py
``BoardRules``): ``score`` on ``order: desc`` boards, ``-score`` on ``order: asc``
ones, so "higher is better" everywhere inside (Redis, generation segments, award
snapshots, Spark). Answers are built from oriented scores too (ranks, positions and
cursors need no change) and turned into real scores here, once, just before they
leave: on an ``asc`` board every score-valued field is negated. Desc boards are
never touched.
"""

from __future__ import annotations

from typing import Any

import orjson

from conf.boards import DEFAULT_GAME, BoardsConfig, board_rules, qualify

WINDOWS = ("daily", "weekly", "monthly", "alltime")

# Score-valued fields of read answers (API.md): a score, or a difference of two.
SCORE_FIELDS = frozenset(
    {"score", "fromScore", "toScore", "ownScoreChange", "oldScore", "newScore"}
)
# Nested event bodies (a history's "changes") carry match points, not scores.
OPAQUE_FIELDS = frozenset({"changes", "generation", "asOf", "boundary", "cursors"})


def real_scores(value: Any, sign: int) -> Any:
    """``value`` (a decoded answer) with every score field multiplied by ``sign``
    (in place for dicts and lists; returned too)."""
    if sign == 1:
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if (
                key in SCORE_FIELDS
                and isinstance(item, int)
                and not isinstance(item, bool)
            ):
                value[key] = -item
            elif key not in OPAQUE_FIELDS and isinstance(item, dict | list):
                real_scores(item, sign)
    elif isinstance(value, list):
        for item in value:
            real_scores(item, sign)
    return value


def real_buckets(
    lowers: list[int], counts: list[int], oriented_max: int | None, sign: int
) -> list[tuple[int, int | None, int]]:
    """(lower, upper, count) of the real scores, ascending, from equi-depth buckets
    over oriented scores (``lowers`` ascending; a bucket holds ``lower <= s < next
    lower``, the last one everything from its lower up to ``oriented_max``).

    On an asc board the oriented bucket ``[lo, up)`` holds the real scores
    ``(-up, -lo]``, which for integers is ``[-up + 1, -lo + 1)``; the last oriented
    bucket becomes the first real one, starting at the lowest real score
    ``-oriented_max``; the first becomes the last, open above (``upper`` None)."""
    if not lowers:
        return []
    uppers: list[int | None] = [*lowers[1:], None]
    if sign == 1:
        return list(zip(lowers, uppers, counts, strict=True))
    out: list[tuple[int, int | None, int]] = []
    for i in range(len(lowers) - 1, -1, -1):
        up = uppers[i]
        lower = (
            -oriented_max
            if up is None and oriented_max is not None
            else (-up + 1 if up is not None else -lowers[i])
        )
        upper = None if i == 0 else -lowers[i] + 1
        out.append((lower, upper, counts[i]))
    return out


# The last config asked about and its answer (asked per read of several routes;
# a config is replaced, never changed, when the boards file is reloaded).
_ASC_OF: tuple[object, bool] = (None, False)


def has_asc_boards(config: BoardsConfig) -> bool:
    global _ASC_OF
    known, answer = _ASC_OF
    if known is config:
        return answer
    answer = any(
        any(s.order == "asc" for s in boards.seasons)
        or any(boards.windows.of(w).order == "asc" for w in WINDOWS)
        for _, boards in config.each_game()
    )
    _ASC_OF = (config, answer)
    return answer


def real_body(config: BoardsConfig, body: bytes) -> bytes | None:
    """The encoded answer ``body`` with real scores when its board is an asc one;
    None when nothing changes (a desc board, or an answer naming no board)."""
    if not has_asc_boards(config):
        return None
    decoded = orjson.loads(body)
    board = decoded.get("board") if isinstance(decoded, dict) else None
    if not isinstance(board, str):
        return None
    # Another game's answer names its board bare, with its game (board_label).
    game = decoded.get("game", DEFAULT_GAME)
    if isinstance(game, str):
        board = qualify(game, board)
    sign = board_rules(config, board).sign
    if sign == 1:
        return None
    return orjson.dumps(real_scores(decoded, sign))


__all__ = ["SCORE_FIELDS", "has_asc_boards", "real_body", "real_buckets", "real_scores"]
