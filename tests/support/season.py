"""Season S9 closing during a test: its boards file, waiting for the close,
results posted at a given moment, its boards' statuses in a reply, a season played
and past its close, ``lb season close`` run in the test's process."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from cli.main import main as cli_main
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


def closed_season(
    settings: Settings, tmp_path: Path, scores: dict[str, int]
) -> Settings:
    """Season S9 with ``scores`` (player -> points, match M1) played, past its close
    time."""
    end = datetime.now(UTC) + timedelta(seconds=3)
    cfg = season_settings(settings, tmp_path, end)
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        for player, points in scores.items():
            post(api, player, "M1", points, end - timedelta(minutes=5))
    wait_until(end + timedelta(seconds=3))
    return cfg


def lb_close_here(
    cfg: Settings, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """`lb season close S9` run in this process (its exit code and output): the CLI
    takes the running SparkSession, the tests' one, instead of starting a JVM."""
    for name in [k for k in os.environ if k.startswith("LB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LB_DATA_DIR", str(cfg.data_dir))
    monkeypatch.setenv("LB_REDIS_URL", cfg.redis_url or "")
    monkeypatch.setenv("LB_PARTITIONS", str(cfg.partitions))
    monkeypatch.setenv("LB_BOARDS_FILE", str(cfg.boards_file))
    capfd.readouterr()
    code = cli_main(["season", "close", "S9"])
    out, err = capfd.readouterr()
    return code, out + err
