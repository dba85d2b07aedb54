"""Rolling windows close at period end + windowLateness (real Redis, real clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from tests.conftest import SignedClient, event
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration


def test_closed_daily_board_holds_events_for_review(
    settings: Settings, tmp_path: Path
) -> None:
    boards = tmp_path / "hour.yaml"
    boards.write_text('regions: [eu]\nwindowLateness: "PT1H"\n')
    cfg = settings.model_copy(update={"boards_file": boards})
    now = datetime.now(UTC)
    two_days_ago = now - timedelta(days=2)
    day = two_days_ago.strftime("%Y-%m-%d")
    occurred = two_days_ago.strftime("%Y-%m-%dT%H:%M:%SZ")
    today = now.strftime("%Y-%m-%d")
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        body = api.post(
            "/v1/score-events", event(occurredAt=occurred, result={"points": 7})
        ).json()
        items = {b["board"]: b for b in body["boards"]}
        assert body["status"] == "accepted"  # all-time still applies
        assert items[f"daily:{day}:eu"]["status"] == "late-review"
        assert items[f"daily:{day}:eu"]["total"] == 0
        assert items["alltime:all:eu"] == {
            "board": "alltime:all:eu",
            "total": 7,
            "version": 1,
        }
        # A fresh event today feeds the open daily board.
        fresh = api.post(
            "/v1/score-events",
            event(
                eventId="E2",
                matchId="M2",
                occurredAt=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                result={"points": 3},
            ),
        ).json()
        assert (
            "status"
            not in {b["board"]: b for b in fresh["boards"]}[f"daily:{today}:eu"]
        )

        write_generation(
            cfg.segments_dir,
            1,
            {f"daily:{day}:eu": {"P1": 1}, f"daily:{today}:eu": {"P2": 3}},
        )
        listed = {
            b["board"]: b
            for b in orjson.loads(client.get("/v1/boards").content)["boards"]
        }
        old, new = listed[f"daily:{day}:eu"], listed[f"daily:{today}:eu"]
        assert old["state"] == "closed"
        midnight = (two_days_ago + timedelta(days=1)).strftime("%Y-%m-%d")
        assert old["closesAt"] == f"{midnight}T01:00:00.000Z"
        assert old["nextReset"] == f"{midnight}T00:00:00.000Z"
        assert new["state"] == "open"
        assert "nextReset" in new
