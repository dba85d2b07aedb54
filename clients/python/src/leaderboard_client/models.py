"""Typed answers of the leaderboard service (dataclasses built from its JSON).

Each keeps the whole answer as ``raw``: fields the service adds later stay there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from leaderboard_client.errors import LeaderboardError, error_for

Status = Literal["accepted", "duplicate", "superseded", "late-review", "quarantined"]
STATUSES: tuple[str, ...] = (
    "accepted",
    "duplicate",
    "superseded",
    "late-review",
    "quarantined",
)


@dataclass(frozen=True)
class BoardOutcome:
    """What one event did to one board: the player's ``total`` and ``version``
    there, and ``status`` when the board's outcome differs from the event's (a
    season past its cutoff answers ``late-review`` while all-time accepts)."""

    board: str
    total: int
    version: int
    status: str | None = None

    @classmethod
    def of(cls, body: dict[str, Any]) -> BoardOutcome:
        return cls(
            board=str(body["board"]),
            total=int(body["total"]),
            version=int(body["version"]),
            status=body.get("status"),
        )


@dataclass(frozen=True)
class EventResult:
    """The answer to one score event."""

    event_id: str
    player_id: str
    status: str
    boards: list[BoardOutcome]
    partition: int
    position: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: dict[str, Any]) -> EventResult:
        return cls(
            event_id=str(body["eventId"]),
            player_id=str(body["playerId"]),
            status=str(body["status"]),
            boards=[BoardOutcome.of(b) for b in body.get("boards", [])],
            partition=int(body["partition"]),
            position=int(body["position"]),
            raw=body,
        )

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def duplicate(self) -> bool:
        return self.status == "duplicate"

    @property
    def superseded(self) -> bool:
        return self.status == "superseded"

    @property
    def late_review(self) -> bool:
        return self.status == "late-review"

    @property
    def quarantined(self) -> bool:
        return self.status == "quarantined"

    def board(self, name: str) -> BoardOutcome | None:
        return next((b for b in self.boards if b.board == name), None)

    def status_on(self, name: str) -> str | None:
        """This event's status on board ``name`` (its own unless the board's
        differs), or None when the event did not feed that board."""
        outcome = self.board(name)
        if outcome is None:
            return None
        return outcome.status or self.status


@dataclass(frozen=True)
class EventError:
    """A batch item the service refused (``{"error", "detail"}``)."""

    event_id: str | None
    code: str
    detail: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    def exception(self) -> LeaderboardError:
        """The exception a single POST of this event would have raised."""
        return error_for(None, self.raw)


BatchItem = EventResult | EventError


@dataclass(frozen=True)
class Generation:
    id: str
    published_at: str | None
    boundary: dict[str, int]
    complete: bool

    @classmethod
    def of(cls, body: dict[str, Any] | None) -> Generation | None:
        if body is None:
            return None
        return cls(
            id=str(body["id"]),
            published_at=body.get("publishedAt"),
            boundary={str(k): int(v) for k, v in body.get("boundary", {}).items()},
            complete=bool(body.get("complete", False)),
        )


@dataclass(frozen=True)
class Entry:
    position: int | None
    rank: int
    player_id: str
    score: int
    display_name: str | None = None
    country: str | None = None
    tier: str | None = None

    @classmethod
    def of(cls, body: dict[str, Any]) -> Entry:
        position = body.get("position")
        return cls(
            position=int(position) if position is not None else None,
            rank=int(body["rank"]),
            player_id=str(body["playerId"]),
            score=int(body["score"]),
            display_name=body.get("displayName"),
            country=body.get("country"),
            tier=body.get("tier"),
        )


@dataclass(frozen=True)
class Cursors:
    before: str | None
    after: str | None

    @classmethod
    def of(cls, body: dict[str, Any] | None) -> Cursors:
        body = body or {}
        return cls(before=body.get("before"), after=body.get("after"))


@dataclass(frozen=True, kw_only=True)
class Labels:
    """What every ranked answer says about itself (API.md, Reads): ``exactness``
    ``exact`` or ``approximate`` (then ``error_bound`` is the largest possible rank
    error), ``basis`` ``snapshot`` / ``live`` / ``histogram``, the generation it
    reads, and ``as_of``, the log position per partition it includes."""

    board: str
    mode: str
    exactness: str
    basis: str
    error_bound: int
    generation: Generation | None
    as_of: dict[str, int]
    population: int
    ranking: str | None = None
    live_layer: str | None = None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def exact(self) -> bool:
        return self.exactness == "exact"

    @staticmethod
    def fields_of(body: dict[str, Any]) -> dict[str, Any]:
        return {
            "board": str(body["board"]),
            "mode": str(body["mode"]),
            "exactness": str(body["exactness"]),
            "basis": str(body["basis"]),
            "error_bound": int(body.get("errorBound", 0)),
            "generation": Generation.of(body.get("generation")),
            "as_of": {str(k): int(v) for k, v in (body.get("asOf") or {}).items()},
            "population": int(body.get("population", 0)),
            "ranking": body.get("ranking"),
            "live_layer": body.get("liveLayer"),
            "raw": body,
        }


def _entries(body: dict[str, Any]) -> list[Entry]:
    return [Entry.of(e) for e in body.get("entries", [])]


@dataclass(frozen=True, kw_only=True)
class Top(Labels):
    entries: list[Entry]

    @classmethod
    def of(cls, body: dict[str, Any]) -> Top:
        return cls(entries=_entries(body), **Labels.fields_of(body))


@dataclass(frozen=True, kw_only=True)
class PlayerRank(Labels):
    player_id: str
    score: int
    rank: int
    position: int | None
    top_percent: float

    @classmethod
    def of(cls, body: dict[str, Any]) -> PlayerRank:
        position = body.get("position")
        return cls(
            player_id=str(body["playerId"]),
            score=int(body["score"]),
            rank=int(body["rank"]),
            position=int(position) if position is not None else None,
            top_percent=float(body["topPercent"]),
            **Labels.fields_of(body),
        )


@dataclass(frozen=True, kw_only=True)
class Page(Labels):
    """Entries around a player (``nearby``) or one page of ``entries``, with the
    cursors of the pages before and after (None at either end)."""

    entries: list[Entry]
    cursors: Cursors
    player_id: str | None = None

    @classmethod
    def of(cls, body: dict[str, Any]) -> Page:
        return cls(
            entries=_entries(body),
            cursors=Cursors.of(body.get("cursors")),
            player_id=body.get("playerId"),
            **Labels.fields_of(body),
        )


@dataclass(frozen=True, kw_only=True)
class Friends(Labels):
    player_id: str
    entries: list[Entry]

    @classmethod
    def of(cls, body: dict[str, Any]) -> Friends:
        return cls(
            player_id=str(body["playerId"]),
            entries=_entries(body),
            **Labels.fields_of(body),
        )


@dataclass(frozen=True)
class Awards:
    """One page of a closed season's award snapshot (immutable per version)."""

    board: str
    season: str
    version: int
    generation: str
    boundary: dict[str, int]
    hash: str
    closed_at: str
    population: int
    entries: list[Entry]
    cursors: Cursors
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, body: dict[str, Any]) -> Awards:
        return cls(
            board=str(body.get("board", "")),
            season=str(body["season"]),
            version=int(body["version"]),
            generation=str(body["generation"]),
            boundary={str(k): int(v) for k, v in body.get("boundary", {}).items()},
            hash=str(body["hash"]),
            closed_at=str(body["closedAt"]),
            population=int(body.get("population", 0)),
            entries=_entries(body),
            cursors=Cursors.of(body.get("cursors")),
            raw=body,
        )


@dataclass(frozen=True)
class Board:
    board: str
    window: str
    period: str
    scope: str
    aggregation: str
    tie_break: str
    state: str
    closes_at: str | None
    next_reset: str | None
    latest_generation: str | None
    # "desc": higher scores are better; "asc": lower ones.
    order: str = "desc"
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def of(cls, body: dict[str, Any]) -> Board:
        return cls(
            board=str(body["board"]),
            window=str(body["window"]),
            period=str(body["period"]),
            scope=str(body["scope"]),
            aggregation=str(body["aggregation"]),
            tie_break=str(body["tieBreak"]),
            state=str(body["state"]),
            closes_at=body.get("closesAt"),
            next_reset=body.get("nextReset"),
            latest_generation=body.get("latestGeneration"),
            order=str(body.get("order", "desc")),
            raw=body,
        )
