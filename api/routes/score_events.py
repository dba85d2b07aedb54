"""Writes: signed score events, one at a time or in batches of up to 1000.

Both are :class:`api.direct.DirectRoute` routes: they read the raw body (its signature
covers the exact bytes) and the app's state (``request.app.state``), so FastAPI calls
them without dependency injection.
"""

from __future__ import annotations

import collections
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from prometheus_client import Counter

from api.deps import read_body_limited
from api.direct import DirectRoute
from api.errors import (
    WRITE_ERROR_RESPONSES,
    Conflict,
    EventTooOld,
    ForbiddenGame,
    ImplausibleEvent,
    InvalidRequest,
    TooManyRequests,
    error_body,
)
from api.games import game_of
from api.metrics import record_outcomes, record_rejected
from api.models import BatchIn, BatchResultOut, EventResultOut, json_body
from api.responses import FastJSONResponse
from api.security import verify
from conf.boards import DEFAULT_GAME, BoardsConfig, split_board
from conf.rules import Implausible, RuleRegistry
from conf.settings import Settings
from speed.audit import append_audit, audit_entry
from speed.events import (
    EventInvalid,
    NormalizedEvent,
    ScoreEventIn,
    TooOld,
    validate_event,
)
from speed.store import EventConflict, Outcome, RateLimited, SpeedLayer

router = APIRouter(
    prefix="/v1",
    tags=["score-events"],
    responses=WRITE_ERROR_RESPONSES,
    route_class=DirectRoute,
)

IMPLAUSIBLE = Counter(
    "lb_implausible_events_total",
    "Events refused as implausible (422), by the plausibility bound they broke",
    ["bound"],
)


def _implausible(exc: Implausible) -> ImplausibleEvent:
    IMPLAUSIBLE.labels(exc.bound).inc()
    return ImplausibleEvent(exc.detail, bound=exc.bound)


async def read_signed_body(request: Request, settings: Settings) -> bytes:
    """The raw body, at most ``max_body_bytes``, after checking its signature and
    that its key may write the game the path names (403 ``forbidden_game``)."""
    body = await read_body_limited(request, settings.max_body_bytes)
    # Who signed: the actor of audit entries (corrections).
    request.state.key_id = verify(
        settings.signing_keys,
        request.headers.get("x-key-id"),
        request.headers.get("x-signature"),
        body,
        settings.signature_window_seconds,
    )
    allowed = settings.key_games.get(request.state.key_id)
    if allowed is not None and game_of(request.scope) not in allowed:
        raise ForbiddenGame(
            f"key {request.state.key_id!r} may write only " + ", ".join(sorted(allowed))
        )
    return body


def shown(body: dict[str, Any], game: str) -> dict[str, Any]:
    """A write's answer with its boards named as the game's clients name them."""
    if game == DEFAULT_GAME:
        return body
    return {
        **body,
        "boards": [
            {**item, "board": split_board(item["board"])[1]}
            for item in body.get("boards", ())
        ],
    }


def _parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"body is not valid JSON: {exc}", field="body") from None


def checked_event(
    raw: Any,
    settings: Settings,
    boards: BoardsConfig,
    now: datetime,
    rules: RuleRegistry,
    game: str = DEFAULT_GAME,
) -> NormalizedEvent:
    """:func:`speed.events.validate_event` with its failures as API errors:
    InvalidRequest naming the field, EventTooOld, or ImplausibleEvent."""
    try:
        return validate_event(raw, settings, boards, now, rules, game)
    except TooOld as exc:
        raise EventTooOld(str(exc), field=exc.field) from None
    except EventInvalid as exc:
        raise InvalidRequest(str(exc), field=exc.field) from None
    except Implausible as exc:
        raise _implausible(exc) from None


# A correction that changed something (or was recorded for review) is audited.
AUDITED_STATUSES = frozenset({"accepted", "late-review", "quarantined"})


async def audit_corrections(
    speed: SpeedLayer, actor: str, applied: list[tuple[NormalizedEvent, Outcome]]
) -> None:
    """One audit entry per correction the speed layer took (one round trip)."""
    entries = []
    for normalized, outcome in applied:
        event = normalized.event
        body = outcome.body
        if event.kind != "correction" or not body:
            continue
        if body["status"] not in AUDITED_STATUSES:
            continue
        details = {
            "playerId": event.playerId,
            "matchId": event.matchId,
            "sourceRevision": event.sourceRevision,
            "status": body["status"],
            "position": body["position"],
            "partition": body["partition"],
            "totals": {b["board"]: b["total"] for b in body["boards"]},
        }
        entries.append(
            audit_entry(actor, "correction", event.eventId, event.reason, details)
        )
    await append_audit(speed.client, entries)


@router.post(
    "/score-events",
    response_model=EventResultOut,
    openapi_extra=json_body(ScoreEventIn),
)
async def submit_score_event(request: Request) -> FastJSONResponse:
    """Accept one match result exactly once; answers after Redis made it durable."""
    state = request.app.state
    settings: Settings = state.settings
    boards: BoardsConfig = state.boards
    speed: SpeedLayer = state.speed
    body = await read_signed_body(request, settings)
    game = game_of(request.scope)
    try:
        event = checked_event(
            _parse_json(body), settings, boards, datetime.now(UTC), speed.rules, game
        )
    except (InvalidRequest, ImplausibleEvent) as exc:
        record_rejected(exc.code)
        raise
    event.key_id = request.state.key_id  # its key's rate limit (LB_KEY_RATE_LIMIT)
    (outcome,) = await speed.apply([event])
    if isinstance(outcome.error, EventConflict):
        record_rejected("event_conflict")
        raise Conflict(str(outcome.error))
    if isinstance(outcome.error, Implausible):
        raise _implausible(outcome.error)
    if isinstance(outcome.error, RateLimited):
        record_rejected("rate_limited")
        raise TooManyRequests(str(outcome.error), outcome.error.retry_after)
    record_outcomes([outcome.body["status"]] if outcome.body else [])
    await audit_corrections(speed, request.state.key_id, [(event, outcome)])
    return FastJSONResponse(shown(outcome.body, game) if outcome.body else None)


@router.post(
    "/score-events:batch",
    response_model=BatchResultOut,
    openapi_extra=json_body(BatchIn),
)
async def submit_score_event_batch(request: Request) -> FastJSONResponse:
    """Accept up to 1000 events; one result per event, in order."""
    state = request.app.state
    settings: Settings = state.settings
    boards: BoardsConfig = state.boards
    speed: SpeedLayer = state.speed
    body = await read_signed_body(request, settings)
    game = game_of(request.scope)
    payload = _parse_json(body)
    if not isinstance(payload, dict) or set(payload) != {"events"}:
        raise InvalidRequest('body must be {"events": [...]}', field="events")
    raw_events = payload["events"]
    if not isinstance(raw_events, list) or not raw_events:
        raise InvalidRequest("events must be a non-empty list", field="events")
    if len(raw_events) > settings.max_batch_events:
        raise InvalidRequest(
            f"at most {settings.max_batch_events} events per batch", field="events"
        )
    now = datetime.now(UTC)
    results: list[dict[str, Any] | None] = [None] * len(raw_events)
    valid: list[tuple[int, NormalizedEvent]] = []
    for index, raw in enumerate(raw_events):
        try:
            valid.append(
                (index, checked_event(raw, settings, boards, now, speed.rules, game))
            )
        except (InvalidRequest, ImplausibleEvent) as exc:
            results[index] = error_body(exc.code, exc.detail, **exc.extra)
    for _, event in valid:
        event.key_id = request.state.key_id
    outcomes = await speed.apply([event for _, event in valid])
    await audit_corrections(
        speed,
        request.state.key_id,
        [(event, o) for (_, event), o in zip(valid, outcomes, strict=True)],
    )
    for (index, _), outcome in zip(valid, outcomes, strict=True):
        if outcome.body is not None:
            results[index] = shown(outcome.body, game)
        elif isinstance(outcome.error, EventConflict):
            results[index] = error_body("event_conflict", str(outcome.error))
        elif isinstance(outcome.error, Implausible):
            bad = _implausible(outcome.error)
            results[index] = error_body(bad.code, bad.detail, **bad.extra)
        elif isinstance(outcome.error, RateLimited):
            results[index] = error_body(
                "rate_limited", str(outcome.error), retryAfter=outcome.error.retry_after
            )
    # Metrics once per distinct outcome, not once per event.
    errors = collections.Counter(
        item["error"] for item in results if item and "error" in item
    )
    for code, count in errors.items():
        record_rejected(code, count)
    record_outcomes(item["status"] for item in results if item and "error" not in item)
    return FastJSONResponse({"results": results})
