"""Encoded answers: the JSON bytes of a read, its headers and the players it names."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from api.degraded import (
    LIVE_LAYER_HEADER,
)
from serving.ranking import Ranking


@dataclass(frozen=True, slots=True)
class Answer:
    """An encoded answer: the JSON bytes, any extra headers, and the players it
    names (its ``playerId`` and its entries'), whose profiles it may carry
    (:meth:`ReadService.profiled`); ``ranking``: the ranking its ranks are under
    when the read was asked for one (None: the board's own, or not named yet:
    :class:`api.reads.ranking.Ranker` reranks it)."""

    body: bytes
    headers: Mapping[str, str] | None = None
    players: tuple[str, ...] = ()
    ranking: Ranking | None = None


def players_of(body: dict[str, Any]) -> tuple[str, ...]:
    # Entries of a ranked answer name a player; a history's entries are generations.
    named = [e["playerId"] for e in body.get("entries", ()) if "playerId" in e]
    if "playerId" in body:
        named.append(body["playerId"])
    return tuple(dict.fromkeys(named))


def encode(body: dict[str, Any], ranking: Ranking | None = None) -> Answer:
    return Answer(orjson.dumps(body), None, players_of(body), ranking)


def degraded(body: dict[str, Any]) -> Answer:
    return Answer(
        orjson.dumps({**body, "liveLayer": "unavailable"}),
        {LIVE_LAYER_HEADER: "unavailable"},
        players_of(body),
    )


def with_profiles(answer: Answer, profiles: dict[str, dict[str, str]]) -> Answer:
    """The answer with ``displayName`` and ``country`` on its entries (and on the
    player of a player read) where set; unchanged without any."""
    if not profiles:
        return answer
    body = orjson.loads(answer.body)
    for entry in body.get("entries", ()):
        entry.update(profiles.get(entry["playerId"], ()))
    if "playerId" in body:
        body.update(profiles.get(body["playerId"], ()))
    return Answer(orjson.dumps(body), answer.headers, answer.players)


async def resolve(read: Answer | Awaitable[Answer]) -> Answer:
    """The answer of a read that may or may not need awaiting."""
    return read if isinstance(read, Answer) else await read


def echo_ranking(answer: Answer, ranking: Ranking) -> Answer:
    """The answer naming its ranking (appended to the encoded object: no decode)."""
    tail = b'"ranking":"' + ranking.encode() + b'"}'
    body = answer.body[:-1] + (b"," if len(answer.body) > 2 else b"") + tail
    return Answer(body, answer.headers, answer.players)
