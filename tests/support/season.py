"""Season S9 closing during a test: its boards file, waiting for the close,
results posted at a given moment, its boards' statuses in a reply."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conf.settings import Settings
from tests.support.clients import SignedClient, event


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def season_settings(settings: Settings, tmp: Path, end: datetime) -> Settings:
    """Season S9 ends at ``end`` with 3 s of lateness; tiers top 1 and top 2."""
    path = tmp / "season-boards.yaml"
    path.write_text(
        f"""
regions: [eu]
seasons:
  - id: S9
    start: "{iso(end - timedelta(days=1))}"
    end: "{iso(end)}"
    allowedLateness: "PT3S"
    aggregation: sum
    tiers:
      - {{name: champion, top: 1}}
      - {{name: podium, top: 2}}
windowLateness: "P3650D"
"""
    )
    return settings.model_copy(update={"boards_file": path})


def wait_until(moment: datetime) -> None:
    delay = (moment - datetime.now(UTC)).total_seconds()
    if delay > 0:
        time.sleep(delay + 0.05)


def post(
    api: SignedClient,
    player: str,
    match: str,
    points: int,
    when: datetime,
    **extra: Any,
) -> dict[str, Any]:
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=extra.pop("eventId", f"{player}-{match}"),
            playerId=player,
            matchId=match,
            occurredAt=iso(when),
            region="eu",
            result={"points": points},
            **extra,
        ),
    )
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]


def board_status(body: dict[str, Any], board: str) -> str:
    (item,) = [b for b in body["boards"] if b["board"] == board]
    return str(item.get("status", body["status"]))
