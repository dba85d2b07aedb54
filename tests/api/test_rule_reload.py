"""A season promoted to another rule while the API runs scores under it at once.

``lb replay --promote`` rewrites the rule state file; a running API must not keep
scoring the season under the old rule until someone restarts it (issue 10). Real
Redis, the real app; the promotion here writes the state file the way
``promote_season`` does (its Spark publish and rebuild are tested in tests/jobs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from conf.boards import load_boards
from conf.rule_state import RuleState, RuleStateWatcher, save_rule_state
from conf.settings import Settings
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration


def match(n: int, at: str) -> dict[str, object]:
    # v1 scores result.points (30); v2 scores the record: 100 for 1st place,
    # 10 per kill, one per minute played = 145.
    record = {"points": 30, "placement": 1, "kills": 3, "durationSeconds": 900}
    return event(eventId=f"E{n}", matchId=f"M{n}", occurredAt=at, result=record)


def applied(body: dict[str, object]) -> dict[str, int]:
    return {b["board"]: b["total"] for b in body["boards"]}  # type: ignore[attr-defined]


def test_promotion_reaches_a_running_api(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        client.app.state.rule_watcher.interval = 0.0  # type: ignore[attr-defined]
        first = api.post("/v1/score-events", match(1, "2026-11-20T10:00:00Z"))
        assert first.status_code == 200, first.text
        assert applied(first.json())["season:S4:eu"] == 30
        rules = {b["board"]: b["rule"] for b in api.get("/v1/boards").json()["boards"]}
        assert rules["season:S4:eu"] == "v1"

        save_rule_state(settings.data_dir, RuleState(promoted={"S4": "v2"}))

        second = api.post("/v1/score-events", match(2, "2026-11-20T12:00:00Z"))
        assert second.status_code == 200, second.text
        totals = applied(second.json())
        assert totals["season:S4:eu"] == 30 + 145
        # Only the season was promoted: the all-time board still scores v1.
        assert totals["alltime:all:eu"] == 30 + 30
        rules = {b["board"]: b["rule"] for b in api.get("/v1/boards").json()["boards"]}
        assert rules["season:S4:eu"] == "v2"


def test_watcher_reads_the_file_only_when_it_changed(tmp_path: Path) -> None:
    config = load_boards(Path(__file__).resolve().parents[2] / "conf" / "boards.yaml")
    now = [0.0]
    watcher = RuleStateWatcher(config, tmp_path, interval=1.0, clock=lambda: now[0])
    assert watcher.boards.season("S4").rule == "v1"  # type: ignore[union-attr]
    assert watcher.poll() is None  # no state file yet, nothing changed

    save_rule_state(tmp_path, RuleState(promoted={"S4": "v2"}))
    now[0] = 0.5
    assert watcher.poll() is None  # within the interval: not even a stat
    now[0] = 1.0
    promoted = watcher.poll()
    assert promoted is not None
    assert promoted.season("S4").rule == "v2"  # type: ignore[union-attr]
    now[0] = 7.0
    assert watcher.poll() is None  # unchanged since

    save_rule_state(tmp_path, RuleState())
    now[0] = 8.0
    reverted = watcher.poll()
    assert reverted is not None and reverted.season("S4").rule == "v1"  # type: ignore[union-attr]
