"""Score events: the validated wire model, normalization and content fingerprint."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints

# Ids are non-empty printable strings of at most 128 bytes (checked in bytes below,
# since 128 characters of UTF-8 can be up to 512 bytes).
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=128)]
PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")
RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)
MAX_ID_BYTES = 128


class EventResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    points: StrictInt


class ScoreEventIn(BaseModel):
    """One match result from a trusted game server (API.md, POST /v1/score-events)."""

    model_config = ConfigDict(extra="forbid")

    eventId: Identifier
    playerId: Identifier
    matchId: Identifier
    sourceRevision: StrictInt = Field(ge=1, le=2**53)
    occurredAt: str
    region: Identifier
    result: EventResult
    kind: Literal["result", "correction"] = "result"
    reason: str | None = Field(default=None, max_length=1024)


class EventInvalid(ValueError):
    """Semantic validation failed; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_rfc3339(value: str) -> datetime:
    if not RFC3339.match(value):
        raise ValueError(
            "must be an RFC 3339 timestamp with offset, e.g. 2026-11-20T10:00:00Z"
        )
    text = value.replace("z", "Z").replace("t", "T").replace(" ", "T")
    # Python accepts at most microseconds; trim extra fractional digits.
    text = re.sub(r"\.(\d{6})\d+", r".\1", text)
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


class NormalizedEvent:
    """A validated event with its canonical form, fingerprint and occurredAt."""

    __slots__ = ("event", "occurred_at", "canonical", "fingerprint")

    def __init__(self, event: ScoreEventIn, occurred_at: datetime) -> None:
        self.event = event
        self.occurred_at = occurred_at
        body = {
            "eventId": event.eventId,
            "playerId": event.playerId,
            "matchId": event.matchId,
            "sourceRevision": event.sourceRevision,
            "occurredAt": occurred_at.isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"
            ),
            "region": event.region,
            "points": event.result.points,
            "kind": event.kind,
            "reason": event.reason,
        }
        self.canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        self.fingerprint = hashlib.blake2b(self.canonical, digest_size=12).hexdigest()


def normalize(
    event: ScoreEventIn,
    *,
    regions: list[str],
    points_min: int,
    points_max: int,
    now: datetime,
    max_future: timedelta,
) -> NormalizedEvent:
    """Check what the schema cannot (bytes, printable, bounds, clock); normalize."""
    for name in ("eventId", "playerId", "matchId"):
        value = getattr(event, name)
        if len(value.encode("utf-8")) > MAX_ID_BYTES:
            raise EventInvalid(name, f"must be at most {MAX_ID_BYTES} bytes")
        if not PRINTABLE.match(value) or not value.isprintable():
            raise EventInvalid(name, "must be a printable string")
    if event.region not in regions:
        raise EventInvalid(
            "region", f"unknown region; configured: {', '.join(regions)}"
        )
    points = event.result.points
    if not points_min <= points <= points_max:
        raise EventInvalid(
            "result.points", f"must be an integer in [{points_min}, {points_max}]"
        )
    if event.kind == "correction" and not (event.reason and event.reason.strip()):
        raise EventInvalid("reason", "required for corrections")
    try:
        occurred_at = parse_rfc3339(event.occurredAt)
    except ValueError as exc:
        raise EventInvalid("occurredAt", str(exc)) from None
    if occurred_at > now + max_future:
        raise EventInvalid(
            "occurredAt", f"more than {int(max_future.total_seconds())} s in the future"
        )
    return NormalizedEvent(event, occurred_at)
