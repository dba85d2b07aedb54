"""Typed shapes of the history and diff answers (api/history.py), as
/openapi.json documents them; tests validate real answers against them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class AwardRefOut(_Out):
    season: str
    version: int


class SnapshotRefOut(_Out):
    id: str = Field(description="the generation (of an award snapshot: its source)")
    publishedAt: str | None = Field(description="an award snapshot's closedAt")
    award: AwardRefOut | None = Field(
        default=None, description="present on award snapshot entries"
    )


class ChangeOut(_Out):
    eventId: str
    matchId: str
    kind: Literal["result", "correction"]
    occurredAt: str
    delta: int = Field(description="what the event moved the player's board score by")


class RankChangeOut(_Out):
    from_: int = Field(alias="from")
    to: int
    ownScoreChange: int
    newlyAbove: int = Field(
        description="players above the player here and not in the previous entry"
    )
    noLongerAbove: int = Field(
        description="players above the player in the previous entry and not here"
    )


class HistoryEntryOut(_Out):
    generation: SnapshotRefOut
    score: int
    rank: int
    topPercent: float
    population: int
    changes: list[ChangeOut] = Field(
        description="the player's contributions since the previous listed entry"
    )
    rankChange: RankChangeOut | None = Field(
        description="against the previous listed entry; null on the oldest"
    )


class HistoryOut(_Out):
    board: str
    exactness: Literal["exact"]
    basis: Literal["snapshot"]
    playerId: str
    entries: list[HistoryEntryOut] = Field(description="newest first")


class GenerationRefOut(_Out):
    id: str
    publishedAt: str | None


class MoverOut(_Out):
    playerId: str
    fromRank: int
    toRank: int
    fromScore: int
    toScore: int


class DiffEntryOut(_Out):
    playerId: str
    rank: int
    score: int


class DiffCountsOut(_Out):
    movers: int
    entered: int
    left: int


class DiffOut(_Out):
    board: str
    exactness: Literal["exact"]
    basis: Literal["snapshot"]
    from_: GenerationRefOut = Field(alias="from")
    to: GenerationRefOut
    movers: list[MoverOut] = Field(description="largest rank changes first")
    entered: list[DiffEntryOut] = Field(description="on `to`, not on `from`")
    left: list[DiffEntryOut] = Field(description="on `from`, not on `to`")
    counts: DiffCountsOut
