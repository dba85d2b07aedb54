"""/metrics: every series the operators need (issue 9), the alert rules only use
series that exist, and the rules pass `promtool check rules` / `promtool test rules`.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from api.metrics import GcPauseTimer
from conf.settings import Settings
from jobs.verify import VerifyResult, write_last_verify
from tests.conftest import OPEN_LATENESS, SignedClient, event
from tests.support.live import games_settings
from tests.support.segments import write_generation

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "conf" / "prometheus" / "alerts.yml"
RULES_TEST = REPO / "conf" / "prometheus" / "alerts_test.yml"
BOARD = "season:S4:global"

BOARDS_YAML = """
regions: [eu, na]
seasons:
  - {id: S3, start: "2026-11-01T00:00:00Z", end: "2026-11-10T00:00:00Z",
     allowedLateness: "PT1H"}
  - {id: S4, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN"}
""".replace("OPEN", OPEN_LATENESS)  # S3 closed, S4 open whatever the date


def value(text: str, series: str) -> float:
    """The sample value of one exact series line in an exposition."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in /metrics")


@pytest.mark.integration
def test_metrics_show_every_operational_series(
    settings: Settings, redis_client: redis.Redis, tmp_path: Path
) -> None:
    boards = tmp_path / "boards.yaml"
    boards.write_text(BOARDS_YAML)
    settings = settings.model_copy(update={"boards_file": boards})
    write_generation(settings.segments_dir, 1, {BOARD: {"x": 5, "y": 3}})
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        # Counters live as long as the process (other tests add to them): deltas.
        before = api.get("/metrics").text
        ok = api.post("/v1/score-events", event(eventId="A", playerId="p"))
        assert ok.json()["status"] == "accepted"
        assert (
            api.post("/v1/score-events", event(eventId="A", playerId="p")).json()[
                "status"
            ]
            == "duplicate"
        )
        assert (
            api.post("/v1/score-events", event(eventId="B", playerId="p")).json()[
                "status"
            ]
            == "superseded"
        )
        late = api.post(
            "/v1/score-events",
            event(eventId="C", playerId="q", occurredAt="2026-11-05T00:00:00Z"),
        ).json()
        assert any(b.get("status") == "late-review" for b in late["boards"]), late
        assert api.post("/v1/score-events", {"eventId": "bad"}).status_code == 422
        conflict = api.post(
            "/v1/score-events", event(eventId="A", playerId="p", matchId="other")
        )
        assert conflict.status_code == 409
        batch = api.post(
            "/v1/score-events:batch",
            {"events": [event(eventId="D", playerId="r"), {"eventId": "bad"}]},
        ).json()["results"]
        assert batch[0]["status"] == "accepted" and batch[1]["error"]
        for mode in ("live", "snapshot", "approx"):
            api.get(f"/v1/boards/{BOARD}/players/x", params={"mode": mode})
        api.get(f"/v1/boards/{BOARD}/top")
        write_last_verify(
            settings,
            VerifyResult(
                "r1",
                datetime.now(UTC).isoformat(),
                datetime.now(UTC).isoformat(),
                "g1",
                [BOARD],
                10,
                ["one", "two"],
            ),
        )
        text = api.get("/metrics").text

    def grew(series: str) -> float:
        try:
            start = value(before, series)
        except AssertionError:
            start = 0.0
        return value(text, series) - start

    # C is accepted on its all-time boards and late-review on S3's only.
    assert grew('lb_events_total{status="accepted"}') == 3
    assert grew('lb_events_total{status="duplicate"}') == 1
    assert grew('lb_events_total{status="superseded"}') == 1
    assert grew('lb_events_total{status="late-review"}') == 0
    assert grew('lb_events_total{status="rejected"}') == 3
    assert grew('lb_events_rejected_total{error="invalid_request"}') == 2
    assert grew('lb_events_rejected_total{error="event_conflict"}') == 1
    # Four logged events (A, B, C, D; a duplicate is not logged), none landed.
    backlog = sum(value(text, f'lb_log_backlog{{partition="{p}"}}') for p in range(4))
    assert backlog == 4
    ages = [
        value(text, f'lb_oldest_unlanded_event_age_seconds{{partition="{p}"}}')
        for p in range(4)
    ]
    assert max(ages) < 120 and sum(1 for a in ages if a >= 0) == 4
    assert 0 <= value(text, "lb_generation_age_seconds") < 3600
    assert value(text, "lb_generation_number") == 1
    lag = sum(
        value(text, f'lb_generation_lag_positions{{partition="{p}"}}') for p in range(4)
    )
    assert lag == 4
    changed = f'lb_changed_players{{board="{BOARD}",game="default"}}'
    assert value(text, changed) == 3  # p, q, r
    assert value(text, "lb_verify_divergences") == 2
    for season, state in (("S3", "closing"), ("S4", "open")):
        labels = f'game="default",season="{season}",state="{state}"'
        assert value(text, f"lb_season_state{{{labels}}}") == 1
    for mode in ("live", "snapshot", "approx"):
        series = f'lb_rank_request_seconds_count{{endpoint="rank",mode="{mode}"}}'
        assert grew(series) == 1
    assert grew('lb_redis_errors_total{side="request"}') == 0
    assert value(text, "lb_redis_up") == 1

    # Every series an alert rule reads is exported.
    names = set(re.findall(r"\b(lb_[a-z_]+)", RULES.read_text()))
    exported = {m.group(1) for m in re.finditer(r"^(lb_[a-z_]+)", text, re.M)}
    assert names and names <= exported, names - exported


@pytest.mark.integration
def test_metrics_name_the_game_of_routes_boards_and_seasons(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Two games with the same ids (API.md "Games"): a request, a changed board and
    a season are each labelled with their game."""
    settings = games_settings(redis_url, tmp_path)
    route = "/v1/boards/{board}/top"
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        before = client.get("/metrics").text
        for game in ("default", "arena"):
            reply = api.post(f"/v1/games/{game}/score-events", event())
            assert reply.status_code == 200, reply.text
        for _ in range(2):
            top = client.get(f"/v1/games/arena/boards/{BOARD}/top")
            assert top.status_code == 200, top.text
        assert client.get(f"/v1/boards/{BOARD}/top").status_code == 200
        text = client.get("/metrics").text

    def grew(series: str) -> float:
        try:
            start = value(before, series)
        except AssertionError:
            start = 0.0
        return value(text, series) - start

    for game, reads in (("arena", 2), ("default", 1)):
        # The exposition sorts a series' labels by name.
        labels = f'game="{game}",route="{route}",status="200"'
        assert grew(f"lb_http_requests_total{{{labels}}}") == reads
        timed = f'lb_http_request_seconds_count{{game="{game}",route="{route}"}}'
        assert grew(timed) == reads
        written = f'game="{game}",route="/v1/score-events",status="200"'
        assert grew(f"lb_http_requests_total{{{written}}}") == 1
        changed = f'lb_changed_players{{board="{BOARD}",game="{game}"}}'
        assert value(text, changed) == 1
        season = f'lb_season_state{{game="{game}",season="S4",state="open"}}'
        assert value(text, season) == 1
    assert "arena~" not in text


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        reason = "promtool not installed: run `make promtool` (Debian's prometheus)"
        if os.environ.get("LB_REQUIRE_OPS_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.mark.unit
def test_alert_rules_pass_promtool() -> None:
    tool = promtool()
    checked = subprocess.run(
        [tool, "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "7 rules found" in checked.stdout
    # The unit tests of the rules: each alert fires on its series, and only then.
    tested = subprocess.run(
        [tool, "test", "rules", str(RULES_TEST)], capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.integration
def test_gc_pauses_are_timed_while_the_app_runs(settings: Settings) -> None:
    """Every collection of a worker lands in lb_gc_pause_seconds (the read bench
    tells a worker's own pause from CPU steal with it); the timer leaves with the
    app."""
    series = 'lb_gc_pause_seconds_count{generation="2"}'
    with TestClient(create_app(settings)) as client:
        before = value(client.get("/metrics").text, series)
        gc.collect()
        gc.collect()
        during = value(client.get("/metrics").text, series)
        assert during >= before + 2
    assert not [cb for cb in gc.callbacks if isinstance(cb, GcPauseTimer)]
