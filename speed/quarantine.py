"""Quarantine review: list held events, release one (applied once, as of its
acceptance) or reject it.

A held event is the log record the owner transaction wrote with status
``quarantined``, also kept in its partition's hash ``lb:{pN}:qr`` until a decision.
A release runs the owner transaction again in ``release`` mode with the record's own
event and receive time; the batch layer applies the held record at its original
position once it sees the ``released`` record.
"""

from __future__ import annotations

from typing import Any

import orjson

from conf.boards import DEFAULT_GAME, GAME_SEP
from speed.events import NormalizedEvent, ScoreEventIn, parse_rfc3339
from speed.partitions import Keys
from speed.store import Outcome, SpeedLayer

RECORD_FIELDS = ("points", "placement", "kills", "durationSeconds")


class HeldNotFound(LookupError):
    pass


class HeldAmbiguous(LookupError):
    pass


def game_of(record: dict[str, Any]) -> str:
    """The game of a held log record (records without one are the game default's)."""
    return str(record["event"].get("game") or DEFAULT_GAME)


def _field(record: dict[str, Any]) -> str:
    """The record's field in its partition's quarantine hash (per game)."""
    event = record["event"]
    game = game_of(record)
    identity = (
        event["playerId"]
        if game == DEFAULT_GAME
        else f"{game}{GAME_SEP}{event['playerId']}"
    )
    return Keys.held_field(identity, event["eventId"])


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    event = record["event"]
    return {
        "game": game_of(record),
        "eventId": event["eventId"],
        "playerId": event["playerId"],
        "matchId": event["matchId"],
        "sourceRevision": event["sourceRevision"],
        "occurredAt": event["occurredAt"],
        "region": event["region"],
        "receivedAtMs": record["receivedAtMs"],
        "partition": record["partition"],
        "position": record["position"],
        "scores": event.get("scores", {}),
        "result": {k: event[k] for k in RECORD_FIELDS if event.get(k) is not None},
    }


async def list_held(speed: SpeedLayer, game: str | None = None) -> list[dict[str, Any]]:
    """Every held event (of ``game`` when given), oldest first (by receive time,
    then partition/position)."""
    pipe = speed.client.pipeline(transaction=False)
    for partition in range(speed.partitions):
        pipe.hvals(Keys(partition).quarantine)
    records = [orjson.loads(v) for values in await pipe.execute() for v in values]
    if game is not None:
        records = [r for r in records if game_of(r) == game]
    records.sort(key=lambda r: (r["receivedAtMs"], r["partition"], r["position"]))
    return [_summary(r) for r in records]


async def find_held(
    speed: SpeedLayer,
    event_id: str,
    player_id: str | None,
    game: str = DEFAULT_GAME,
) -> dict[str, Any]:
    """The held log record of ``event_id`` in ``game`` (of ``player_id`` when
    several players used that event id)."""
    found = []
    for partition in range(speed.partitions):
        keys = Keys(partition)
        if player_id is not None:
            identity = (
                player_id if game == DEFAULT_GAME else f"{game}{GAME_SEP}{player_id}"
            )
            raw = await speed.client.hget(
                keys.quarantine, Keys.held_field(identity, event_id)
            )
            if raw is not None:
                found.append(orjson.loads(raw))
            continue
        for raw in await speed.client.hvals(keys.quarantine):
            record = orjson.loads(raw)
            if record["event"]["eventId"] == event_id and game_of(record) == game:
                found.append(record)
    if not found:
        raise HeldNotFound(f"no held event {event_id!r}")
    if len(found) > 1:
        raise HeldAmbiguous(
            f"{len(found)} players hold event id {event_id!r}: give playerId"
        )
    return found[0]


def event_of(record: dict[str, Any]) -> NormalizedEvent:
    """The normalized event of a log record, with the scores it was recorded with
    (same canonical form, so the same fingerprint)."""
    body = record["event"]
    event = ScoreEventIn.model_validate(
        {
            "eventId": body["eventId"],
            "playerId": body["playerId"],
            "matchId": body["matchId"],
            "sourceRevision": body["sourceRevision"],
            "occurredAt": body["occurredAt"],
            "region": body["region"],
            "result": {k: body[k] for k in RECORD_FIELDS if body.get(k) is not None},
            "kind": body["kind"],
            "reason": body["reason"],
        }
    )
    normalized = NormalizedEvent(
        event,
        parse_rfc3339(body["occurredAt"]),
        game=body.get("game") or DEFAULT_GAME,
    )
    normalized.scores = {str(k): int(v) for k, v in body.get("scores", {}).items()}
    return normalized


async def release(speed: SpeedLayer, record: dict[str, Any]) -> Outcome:
    """Apply the held event once, as of its acceptance."""
    (outcome,) = await speed.apply(
        [event_of(record)], release_at_ms=int(record["receivedAtMs"])
    )
    return outcome


async def reject(speed: SpeedLayer, record: dict[str, Any]) -> bool:
    """Drop the held event (it stays in the log as quarantined, never applied)."""
    keys = Keys(int(record["partition"]))
    removed = await speed.client.hdel(keys.quarantine, _field(record))
    return bool(removed)
