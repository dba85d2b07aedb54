"""Live nearby under a stream of writes, with no generation published (issue 23,
item 10a): it answered 503 "a rebase is in progress" when writes landed between
its round trips, though no rebase ran (and again, 2 reads of 300, under a loaded
clean-clone CI in session 31). It must answer, exactly."""

from __future__ import annotations

import collections
import threading
from typing import Any

import httpx
import orjson
import pytest

from api.security import sign
from speed.live import LiveReader
from tests.conftest import DEV_SECRET, SignedClient, event

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"


def seed(api: SignedClient, scores: dict[str, int]) -> None:
    for n, (player, points) in enumerate(scores.items()):
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"seed{n}",
                playerId=player,
                matchId=f"seed{n}",
                result={"points": points},
            ),
        )
        assert reply.status_code == 200, reply.text


def expected_window(
    scores: dict[str, int], player: str, radius: int
) -> list[dict[str, Any]]:
    order = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    ranks: dict[int, int] = {}
    for position, (_, score) in enumerate(order, start=1):
        ranks.setdefault(score, position)
    at = [p for p, _ in order].index(player)
    return [
        {"position": i + 1, "rank": ranks[s], "playerId": p, "score": s}
        for i, (p, s) in enumerate(order)
        if abs(i - at) <= radius
    ]


def test_nearby_settles_when_a_write_lands_between_its_round_trips(
    api: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ties above the window's first entry (Q0..Q2 at 500) and distinct scores below.
    scores = {"Q0": 500, "Q1": 500, "Q2": 500, **{f"R{n}": 400 - n for n in range(12)}}
    seed(api, scores)
    app = api.client.app
    writes = 0
    count_above = LiveReader._count_above

    async def written_between(self: Any, *args: Any, **kwargs: Any) -> Any:
        # A real write from another client lands before every separate count.
        nonlocal writes
        writes += 1
        body = orjson.dumps(
            event(
                eventId=f"w{writes}",
                playerId=f"W{writes}",
                matchId=f"w{writes}",
                result={"points": 1},
            )
        )
        headers = {"X-Key-Id": "dev", "X-Signature": sign(DEV_SECRET, body)}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            reply = await c.post("/v1/score-events", content=body, headers=headers)
        assert reply.status_code == 200, reply.text
        return await count_above(self, *args, **kwargs)

    monkeypatch.setattr(LiveReader, "_count_above", written_between)
    for player, radius in (("R3", 3), ("R0", 2), ("R5", 2), ("R10", 4), ("Q2", 1)):
        reply = api.get(
            f"/v1/boards/{BOARD}/players/{player}/nearby", params={"radius": radius}
        )
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["basis"] == "live" and body["generation"] is None
        everyone = {**scores, **{f"W{n}": 1 for n in range(1, writes + 1)}}
        assert body["entries"] == expected_window(everyone, player, radius)


def test_nearby_never_answers_503_under_concurrent_writes(api: SignedClient) -> None:
    players = [f"P{n}" for n in range(20)]
    seed(api, {p: 10 + n for n, p in enumerate(players)})
    statuses: collections.Counter[int] = collections.Counter()
    failures: list[str] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            api.post(
                "/v1/score-events",
                event(
                    eventId=f"w{w}-{n}",
                    playerId=players[n % 20],
                    matchId=f"w{w}-{n}",
                    result={"points": n % 50},
                ),
            )

    def reader() -> None:
        for n in range(150):
            reply = api.get(
                f"/v1/boards/{BOARD}/players/{players[n % 20]}/nearby",
                params={"radius": 3},
            )
            statuses[reply.status_code] += 1
            if reply.status_code != 200:
                failures.append(reply.text)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in writers + readers:
        thread.start()
    for thread in readers:
        thread.join()
    stop.set()
    for thread in writers:
        thread.join()
    assert statuses[200] == 300, (statuses, failures[:3])


def test_nearby_ranks_ties_from_counts_in_redis(
    api: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """live_nearby.lua counts the changed players above the score from those before
    the entry, less those of its score read just before it, when that read holds
    them all (it reaches a higher score, or ends short of its limit at a bound below
    the score; else a ZLEXCOUNT): a window that starts inside the player's tie
    group takes its first rank from that count (with a base generation, the read's
    bound is a base row's entry: tests/speed/test_script_replies.py's held-count
    comparison draws such bounds). Every player, radii 1-4 (the reads
    before the entry: 2-5 per partition, so some stop inside a tie group and some
    pass it), no changed-set held by the API (each read counts in Redis)."""
    monkeypatch.setattr(LiveReader, "_stable", lambda *_: [])
    scores = {
        "A": 90,
        **{f"T{n}": 70 for n in range(9)},
        "B": 60,
        **{f"U{n}": 40 for n in range(5)},
        "C": 10,
    }
    seed(api, scores)
    for player in scores:
        for radius in (1, 2, 3, 4):
            reply = api.get(
                f"/v1/boards/{BOARD}/players/{player}/nearby", params={"radius": radius}
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["entries"] == expected_window(scores, player, radius), (
                player,
                radius,
            )
