"""A season board seeded through the API, and what every public answer about it
must show (shadow removal tests)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import redis

from conf.settings import Settings
from serving.files import atomic_write_text
from serving.manifest import MANIFEST_FILE, build_manifest, generation_id
from serving.segments import write_hidden, write_segments
from speed.partitions import Keys
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


def publish_hidden(
    settings: Settings,
    client: redis.Redis,
    number: int,
    totals: dict[str, int],
    hidden: set[str],
) -> None:
    """A generation of ``BOARD`` as the batch layer writes it with ``hidden``
    shadowed: off the public rows, in the hidden side file (serving's writer)."""
    boundary = {
        p: int(client.get(Keys(p).position) or 0) for p in range(settings.partitions)
    }
    public = sorted(
        ((p, s) for p, s in totals.items() if p not in hidden),
        key=lambda kv: (-kv[1], kv[0].encode()),
    )
    table = pa.table(
        {
            "board": pa.array([BOARD] * len(public), pa.string()),
            "player_id": pa.array([p for p, _ in public], pa.string()),
            "score": pa.array([s for _, s in public], pa.int64()),
        }
    )
    directory = settings.segments_dir / generation_id(number)
    directory.mkdir(parents=True)
    boards = write_segments(table, directory, bucket_target=2)
    write_hidden([(BOARD, p, totals[p]) for p in sorted(hidden)], directory, boards)
    text = build_manifest(generation_id(number), datetime.now(UTC), boundary, boards)
    atomic_write_text(directory / MANIFEST_FILE, text)
