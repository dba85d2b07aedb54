"""On one Redis server a live read is one script call naming every partition
(speed/live.py ``LiveReader.fused``); on a cluster it is one call per partition.
Both paths give the same answers on the same data: live rank, nearby, top and
dense counts, with ties, a shadowed player, writes after a publish and a rebase
between two reads (the readers' remembered bases and dense parts go stale), and
the desc board's equal the offline sort."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from speed.live import LiveReader
from tests.conftest import SignedClient
from tests.support.live import (
    OPTIONS_RULES,
    PLAYERS,
    Oracle,
    options_settings,
    publish_oracle,
    send,
)
from tests.support.shadow import flag

pytestmark = pytest.mark.integration

# A desc sum board, an asc sum board, an asc best-of board.
BOARDS = ["season:S4:global", "weekly:2026-W47:na", "alltime:all:eu"]


@pytest.fixture
def settings(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Any:
    return options_settings(redis_url, tmp_path)


def answers(api: SignedClient, live: LiveReader, hidden: set[str]) -> dict[str, Any]:
    """Every live read of ``live`` on BOARDS, as plain values."""
    call = api.client.portal.call  # type: ignore[attr-defined]
    out: dict[str, Any] = {}
    for board in BOARDS:
        top = call(live.top, board, 20)
        out[f"{board} top"] = (top["entries"], top["population"], top["asOf"])
        scores = {e["score"] for e in top["entries"]}
        for score in sorted(scores | {min(scores, default=0) - 1, 10_000}):
            dense = call(live.above, board, score)
            out[f"{board} above {score}"] = dense
        for player in PLAYERS:
            if player in hidden or not any(
                e["playerId"] == player for e in top["entries"]
            ):
                continue
            me = call(live.rank, board, player)
            out[f"{board} rank {player}"] = {
                k: v for k, v in me.items() if k not in ("base", "extra")
            }
            for radius in (0, 1, 3):
                near = call(live.nearby, board, player, radius)
                out[f"{board} nearby {player} {radius}"] = (
                    near["entries"],
                    near["rank"],
                    near["asOf"],
                )
    return out


def check(
    api: SignedClient, readers: list[LiveReader], oracle: Oracle, hidden: set[str]
) -> None:
    app = api.client.app  # type: ignore[attr-defined]
    fresh = [LiveReader(app.state.speed, app.state.generations) for _ in range(2)]
    fresh[1].fused = False
    every = [answers(api, r, hidden) for r in [*readers, *fresh]]
    assert every[0] == every[1]
    assert every[2] == every[0]
    assert every[3] == every[0]
    # The desc board's answers are the offline sort (the asc boards' scores are
    # oriented inside the reader: the routes turn them back).
    board = BOARDS[0]
    want = oracle.ordered(board, frozenset(hidden))
    assert every[0][f"{board} top"][0] == want
    ranks = {e["playerId"]: e["rank"] for e in want}
    for player, rank in ranks.items():
        assert every[0][f"{board} rank {player}"]["rank"] == rank, player


def test_fused_and_per_partition_reads_agree(
    api: SignedClient, redis_client: redis.Redis, settings: Any
) -> None:
    app = api.client.app  # type: ignore[attr-defined]
    fused = app.state.live
    assert fused.fused
    split = LiveReader(app.state.speed, app.state.generations)
    split.fused = False
    readers = [fused, split]
    oracle = Oracle(OPTIONS_RULES)
    # Ties: p0, p1, p2 at 10; p3, p4 at 5.
    for player, points in (("p0", 10), ("p1", 10), ("p2", 10), ("p3", 5), ("p4", 5)):
        send(api, oracle, player, 0, points)
    send(api, oracle, "Zed", 0, 7)
    check(api, readers, oracle, set())

    publish_oracle(api, redis_client, oracle, 1, settings.partitions)
    check(api, readers, oracle, set())
    # Changed players after the base: into a tie, out of one, new players.
    send(api, oracle, "p3", 1, 5)
    send(api, oracle, "p5", 0, 10)
    send(api, oracle, "a-long-player-id", 0, 5)
    send(api, oracle, "p6", 0, 2)
    check(api, readers, oracle, set())

    assert flag(api, "p1", "shadow").status_code == 200
    check(api, readers, oracle, {"p1"})

    # A rebase between reads: the readers assume generation 1 and read again.
    publish_oracle(api, redis_client, oracle, 2, settings.partitions)
    send(api, oracle, "p0", 1, 3)
    send(api, oracle, "p2", 1, 1)
    check(api, readers, oracle, {"p1"})
    assert fused._last_bases == split._last_bases == [2] * settings.partitions
