"""tieBreak first_achieved orders ties by when the service accepted the event
(receivedAt, in the log), never by the game server's occurredAt: a backdated event
(older occurredAt, received later) does not win a tie, live, in the published
generation (Spark from the log), and live again after the rebase."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from jobs.publish import run_publish
from speed.rebase import rebase_published
from tests.conftest import SignedClient, event
from tests.support.settings import FA_BOARD, first_achieved_settings

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def timed(
    settings: Settings, tmp_path: Path
) -> Iterator[tuple[SignedClient, Settings]]:
    cfg = first_achieved_settings(settings, tmp_path)
    with TestClient(create_app(cfg)) as client:
        yield SignedClient(client), cfg


def send(api: SignedClient, player: str, ago: timedelta, points: int) -> None:
    occurred = (datetime.now(UTC) - ago).strftime("%Y-%m-%dT%H:%M:%SZ")
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=f"{player}-m1",
            playerId=player,
            matchId="m1",
            occurredAt=occurred,
            result={"points": points},
        ),
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "accepted", reply.text


def order(api: SignedClient, **params: Any) -> list[tuple[str, int, int]]:
    top = api.get(f"/v1/boards/{FA_BOARD}/top", params=params).json()
    return [(e["playerId"], e["rank"], e["position"]) for e in top["entries"]]


def test_a_backdated_event_does_not_win_a_tie(
    timed: tuple[SignedClient, Settings], spark: Any
) -> None:
    api, cfg = timed
    clock = [time.time()]
    api.client.app.state.speed.clock = lambda: clock[0]
    # "Z-first" reaches 30 first; "A-late" reaches 30 a second later with an event
    # dated two hours earlier. By occurredAt (or by player id) A-late would lead.
    send(api, "Z-first", timedelta(hours=1), 30)
    clock[0] += 1
    send(api, "A-late", timedelta(hours=3), 30)
    want = [("Z-first", 1, 1), ("A-late", 1, 2)]
    assert order(api) == want

    generation = run_publish(cfg, spark=spark)
    report = rebase_published(cfg, generation)
    assert set(report.partitions.values()) == {"ok"}
    api.client.app.state.generations.refresh(force=True)
    assert order(api, mode="snapshot") == want
    assert order(api) == want
    # One more tie, received last, backdated furthest: still behind.
    clock[0] += 1
    send(api, "0-oldest", timedelta(hours=5), 30)
    assert order(api) == [*want, ("0-oldest", 1, 3)]
