"""A season board seeded through the API, and what every public answer about it
must show (shadow removal tests)."""

from __future__ import annotations

from typing import Any

from tests.support.clients import SignedClient, event

BOARD = "season:S4:global"


SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880, "P5": 10}


def admin(api: SignedClient) -> SignedClient:
    return SignedClient(api.client, "admin", b"dev-admin-secret")


def flag(api: SignedClient, player: str, action: str, reason: str = "review") -> Any:
    return admin(api).post(
        f"/v1/admin/players/{player}/flags", {"action": action, "reason": reason}
    )


def seed(api: SignedClient, totals: dict[str, int]) -> None:
    for player, points in totals.items():
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"s-{player}",
                playerId=player,
                matchId=f"s-{player}",
                result={"points": points},
            ),
        )
        assert reply.status_code == 200, reply.text


def expected_top(totals: dict[str, int]) -> list[dict[str, Any]]:
    order = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0].encode()))
    return [
        {
            "position": i + 1,
            "rank": 1 + sum(1 for s in totals.values() if s > score),
            "playerId": p,
            "score": score,
        }
        for i, (p, score) in enumerate(order)
    ]


def public_answers(api: SignedClient, totals: dict[str, int]) -> None:
    """Top, others' ranks, nearby and the histogram agree with ``totals``."""
    top = api.get(f"/v1/boards/{BOARD}/top").json()
    assert top["entries"] == expected_top(totals)
    assert top["population"] == len(totals)
    for player, score in totals.items():
        me = api.get(f"/v1/boards/{BOARD}/players/{player}").json()
        assert (me["score"], me["population"]) == (score, len(totals))
        assert me["rank"] == 1 + sum(1 for s in totals.values() if s > score)
    near = api.get(f"/v1/boards/{BOARD}/players/P4/nearby", params={"radius": 5})
    assert [e["playerId"] for e in near.json()["entries"]] == [
        e["playerId"] for e in expected_top(totals)
    ]
    approx = api.get(f"/v1/boards/{BOARD}/players/P5", params={"mode": "approx"})
    # Whatever the buckets, the histogram's population is the visible players.
    assert approx.json()["population"] == len(totals)
