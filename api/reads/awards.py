"""Award pages: a closed season's award snapshot, one immutable version at a time.

A version never changes, so its pages are encoded once and kept; cursors are
positions in one version (:func:`api.reads.cursors.award_cursor`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from api.errors import AwardsNotFound, InvalidRequest
from api.reads.answers import Answer, encode
from api.reads.caches import SnapshotCache
from api.reads.cursors import award_cursor, decode_award_cursor
from api.reads.policy import FallbackPolicy
from conf.boards import board_label, describe_board, qualify, split_board
from serving.awards import AwardVersion, read_version


def award_page(
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


class AwardPages:
    """The award pages of one app (the boards' config is the policy's)."""

    def __init__(self, policy: FallbackPolicy, data_dir: Path) -> None:
        self.policy = policy
        self.data_dir = data_dir
        self._pages = SnapshotCache(16 << 20)

    def page(
        self, board: str, version: int | None, cursor: str | None, limit: int
    ) -> Answer:
        """A page of a closed season's award snapshot; a version never changes,
        so its pages are encoded once and kept."""
        key: tuple[Any, ...] = (board, version, cursor, limit)
        if cursor is not None:
            # By position, not the cursor's text (equal positions share one entry);
            # a bad cursor is _page's to refuse, after the board's check.
            with contextlib.suppress(InvalidRequest):
                data = decode_award_cursor(cursor, board)
                key = (board, version, (data["v"], data["o"], data["d"]), limit)
        answer = self._pages.get(key)
        if answer is None:
            body = self._page(board, version, cursor, limit)
            # Only pinned versions are fixed: "latest" moves with an adjudication.
            answer = encode(body)
            if version is not None or cursor is not None:
                self._pages.put(key, answer)
        return answer

    def _page(
        self, board: str, version: int | None, cursor: str | None, limit: int
    ) -> dict[str, Any]:
        described = describe_board(self.policy.config, board)
        if described is None or described["window"] != "season":
            raise AwardsNotFound(f"{board!r} is not a season board with awards")
        season_id = described["period"]
        if cursor is not None:
            data = decode_award_cursor(cursor, board)
            if version is not None and version != data["v"]:
                raise InvalidRequest(
                    "cursor belongs to another version", field="cursor"
                )
            version = data["v"]
        # A game's season's awards live under its qualified id (arena~S4).
        found = read_version(
            self.data_dir, qualify(split_board(board)[0], season_id), version
        )
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
        entries, population = award_page(found, board, start, stop)
        first = entries[0]["position"] if entries else None
        last = entries[-1]["position"] if entries else None
        meta = found.meta
        return {
            **board_label(board),
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
                "before": award_cursor(board, found.version, first, "before")
                if first is not None and first > 1
                else None,
                "after": award_cursor(board, found.version, last, "after")
                if last is not None and last < population
                else None,
            },
        }
