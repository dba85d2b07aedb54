"""`lb rebuild` rebuilds the plausibility history (each player's recent accepted
matches): a rebuilt speed layer refuses the same implausible events as before
(real Redis; the log is the only input)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from jobs.rebuild import run_rebuild
from speed.partitions import Keys, partition_of
from tests.conftest import SignedClient
from tests.support.rebuild import wipe_all_but_logs
from tests.support.rules import BOARDS_V2, match

pytestmark = pytest.mark.integration


@pytest.fixture
def v2(settings: Settings, tmp_path: Path) -> Iterator[tuple[SignedClient, Settings]]:
    path = tmp_path / "boards-v2.yaml"
    path.write_text(BOARDS_V2.format(window_rule="v2"))
    cfg = settings.model_copy(update={"boards_file": path})
    with TestClient(create_app(cfg)) as client:
        yield SignedClient(client), cfg


def refusal(api: SignedClient, body: dict[str, Any]) -> tuple[int, str]:
    reply = api.post("/v1/score-events", body)
    return reply.status_code, reply.json().get("detail", "")


def test_rebuilt_history_refuses_the_same_implausible_events(
    v2: tuple[SignedClient, Settings], spark: Any, redis_client: redis.Redis
) -> None:
    api, settings = v2
    # P2: 145-point matches need 145 s of event time since the previous one.
    first = api.post("/v1/score-events", match(1, "2026-11-20T10:00:00Z"))
    assert first.status_code == 200, first.text
    too_soon = match(2, "2026-11-20T10:01:00Z")
    # P9: 20 one-point matches in an hour; a 21st in that hour is too many.
    for n in range(20):
        at = f"2026-11-20T10:{2 * n:02d}:00Z"
        body = match(100 + n, at, placement=21, kills=0, playerId="P9")
        assert api.post("/v1/score-events", body).status_code == 200
    too_many = match(200, "2026-11-20T10:41:00Z", placement=21, kills=0, playerId="P9")

    before_soon, before_many = refusal(api, too_soon), refusal(api, too_many)
    assert before_soon[0] == 422 and before_soon[1].startswith("max_points_per_minute")
    assert before_many[0] == 422 and before_many[1].startswith("max_matches_per_hour")
    history = {}
    for player in ("P2", "P9"):
        key = Keys(partition_of(player, settings.partitions)).recent_matches(player)
        history[player] = redis_client.zrange(key, 0, -1, withscores=True)
        assert history[player]

    # Only the logs survive; the rebuild brings the history back from them.
    wipe_all_but_logs(redis_client)
    report = run_rebuild(settings, spark=spark)
    assert set(report.partitions.values()) == {"ok"}
    for player in ("P2", "P9"):
        key = Keys(partition_of(player, settings.partitions)).recent_matches(player)
        assert redis_client.zrange(key, 0, -1, withscores=True) == history[player]
        assert 0 < redis_client.ttl(key) <= 2 * 24 * 3600
    assert refusal(api, too_soon) == before_soon
    assert refusal(api, too_many) == before_many
