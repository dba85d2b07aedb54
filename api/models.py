"""Typed shapes of the API's answers (pydantic), as /openapi.json documents them.

The read service builds its answers as plain dicts and encodes them once with orjson
(byte-for-byte the contract's JSON, and fast: fixed answers are cached as bytes); these
models are what the routes declare, and tests validate real answers against them, so
the documented schema and the bytes on the wire cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    # Answers may grow fields; a client (and the schema) ignores unknown ones.
    model_config = ConfigDict(extra="allow")


class GenerationOut(_Out):
    id: str
    publishedAt: str | None
    boundary: dict[str, int] = Field(
        description="landed-through position per partition"
    )
    complete: bool


class RankedOut(_Out):
    """The labels every ranked answer carries (API.md, Reads)."""

    board: str
    mode: Literal["live", "snapshot", "approx"]
    exactness: Literal["exact", "approximate"]
    basis: Literal["live", "snapshot", "histogram"] = Field(
        description="snapshot: exactly generation `generation`; live: that generation "
        "merged with every accepted event up to `asOf`; histogram: approximate"
    )
    errorBound: int = Field(description="largest possible absolute rank error")
    generation: GenerationOut | None
    asOf: dict[str, int] = Field(
        description="log position per partition the answer includes"
    )
    population: int
    ranking: Literal["competition", "dense", "ordinal"] | None = Field(
        default=None,
        description="the ranking of the answer's ranks (the `ranking` parameter)",
    )
    liveLayer: Literal["unavailable"] | None = Field(
        default=None,
        description="present (and the header X-Live-Layer) when Redis is unreachable "
        "and the latest generation answered instead",
    )


class EntryOut(_Out):
    position: int
    rank: int
    playerId: str
    score: int
    displayName: str | None = Field(default=None, description="absent when unset")
    country: str | None = Field(
        default=None, description="ISO 3166-1 alpha-2; absent when unset"
    )


class CursorsOut(_Out):
    before: str | None = Field(description="the previous page; null at the start")
    after: str | None = Field(description="the next page; null at the end")


class TopOut(RankedOut):
    entries: list[EntryOut] = Field(description="display order")


class RankOut(RankedOut):
    playerId: str
    score: int
    rank: int = Field(description="competition rank: 1 + players with a higher score")
    position: int | None = Field(
        default=None, description="display position (absent from approximate answers)"
    )
    topPercent: float = Field(description="100 * rank / population")


class NearbyOut(RankedOut):
    playerId: str
    entries: list[EntryOut]
    cursors: CursorsOut


class EntriesOut(RankedOut):
    entries: list[EntryOut]
    cursors: CursorsOut


class FriendsOut(RankedOut):
    playerId: str
    entries: list[EntryOut] = Field(description="ranked among the player and friends")


class BoardOut(_Out):
    board: str
    window: str
    period: str
    scope: str
    aggregation: str
    order: Literal["desc", "asc"] = Field(
        default="desc", description="desc: higher scores are better; asc: lower"
    )
    tieBreak: str
    rule: str
    state: Literal["open", "closing", "closed"]
    closesAt: str | None
    nextReset: str | None = Field(default=None, description="rolling windows only")
    latestGeneration: str | None


class BoardsOut(_Out):
    boards: list[BoardOut]


class AwardEntryOut(EntryOut):
    tier: str | None


class AwardsOut(_Out):
    board: str
    season: str
    version: int
    generation: str
    boundary: dict[str, int]
    hash: str
    closedAt: str
    rule: str
    tieBreak: str
    population: int
    entries: list[AwardEntryOut]
    cursors: CursorsOut


class BoardOutcomeOut(_Out):
    board: str
    total: int
    version: int
    status: str | None = Field(
        default=None, description="present when it differs from the event's"
    )


class EventResultOut(_Out):
    eventId: str
    playerId: str
    status: Literal["accepted", "duplicate", "superseded", "late-review", "quarantined"]
    boards: list[BoardOutcomeOut]
    partition: int
    position: int


class BatchResultOut(_Out):
    results: list[dict[str, Any]] = Field(
        description="one per event, in order: a result like POST /v1/score-events "
        "answers, or an error object"
    )


class BatchIn(BaseModel):
    events: list[dict[str, Any]] = Field(description="up to 1000 score events")


class StatusOut(_Out):
    status: Literal["ok", "ready"]
    instance: str | None = Field(default=None, description="set by `lb up`")


class FriendsListOut(_Out):
    playerId: str
    friends: list[str]


class ProfileOut(_Out):
    playerId: str
    displayName: str | None = Field(default=None, description="absent when unset")
    country: str | None = Field(default=None, description="absent when unset")


class ProfileIn(BaseModel):
    displayName: str | None = Field(
        default=None, description="1-32 characters after NFC, no control characters"
    )
    country: str | None = Field(default=None, description="ISO 3166-1 alpha-2")


class FriendsIn(BaseModel):
    friends: list[str] = Field(description="player ids; replaces the list")


class FlagOut(_Out):
    playerId: str
    flag: Literal["shadow"] | None
    changed: bool
    boards: int


class HeldEventsOut(_Out):
    events: list[dict[str, Any]]


class LateEventOut(_Out):
    eventId: str
    playerId: str
    matchId: str
    occurredAt: str
    receivedAt: str
    points: int


class LateReviewOut(_Out):
    events: list[LateEventOut]


class DecisionOut(_Out):
    eventId: str
    playerId: str
    status: str


class AdjudicationOut(_Out):
    version: int
    changes: list[dict[str, Any]]


TEXT_RESPONSE: dict[int | str, Any] = {
    200: {
        "description": "Prometheus text exposition format",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


# The nested models of the request bodies below (``json_body``), by name: the
# document lists them under components/schemas (``with_body_schemas``), where the
# bodies' ``$ref``s point.
BODY_SCHEMAS: dict[str, Any] = {}
_COMPONENT_REF = "#/components/schemas/{model}"


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra=`` for a route that reads its (signed) body itself: the
    request schema, so the document shows what to send."""
    schema = model.model_json_schema(ref_template=_COMPONENT_REF)
    # pydantic puts nested models under the schema's own "$defs"; a "$ref" in an
    # OpenAPI document is resolved from the document's root, so they move there.
    BODY_SCHEMAS.update(schema.pop("$defs", {}))
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


def with_body_schemas(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI ``document`` with the request bodies' nested models in its
    components (FastAPI only lists the models of the parameters it parses)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in BODY_SCHEMAS.items():
        schemas.setdefault(name, schema)
    return document
