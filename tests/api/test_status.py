"""`lb status`: the stack, latest generation and age, backlog per partition, seasons'
states and the last verify, from a real Redis and data dir."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from cli.main import main as lb_main
from conf.boards import load_boards
from conf.settings import Settings
from jobs.verify import VerifyResult, write_last_verify
from tests.conftest import SignedClient, event
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration


def test_status_shows_generation_backlog_seasons_and_verify(
    api: SignedClient,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(3):
        assert api.post("/v1/score-events", event(eventId=f"T{i}")).status_code == 200
    write_generation(settings.segments_dir, 4, {"season:S4:global": {"P2": 1}})
    now = datetime.now(UTC).isoformat()
    write_last_verify(
        settings, VerifyResult("run9", now, now, "g4", ["b"], 7, ["b: x differs"])
    )
    monkeypatch.setenv("LB_REDIS_URL", settings.redis_url or "")
    monkeypatch.setenv("LB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("LB_PARTITIONS", str(settings.partitions))
    # The fixture's boards keep S4 open whatever the date (tests/conftest.py).
    monkeypatch.setenv("LB_BOARDS_FILE", str(settings.boards_file))
    season = load_boards(settings.boards_file).season("S4")
    assert season is not None and season.cutoff > datetime.now(UTC)

    assert lb_main(["status", "--json"]) == 0
    status = orjson.loads(capsys.readouterr().out)
    assert status["generation"]["id"] == "g4"
    assert 0 <= status["generation"]["ageSeconds"] < 600
    # One player (P2), three events (two superseded): three positions, none landed.
    assert sum(p["backlog"] for p in status["partitions"]) == 3
    assert len(status["partitions"]) == settings.partitions
    assert status["seasons"] == [
        {"season": "S4", "state": "open", "closesAt": season.cutoff.isoformat()}
    ]
    assert status["last_verify"]["divergenceCount"] == 1
    assert status["stack"]["redis"].endswith(": up")

    assert lb_main(["status"]) == 0
    screen = capsys.readouterr().out
    assert "generation  g4 published" in screen
    assert "S4      open" in screen
    assert "last verify run9" in screen and "1 divergences (FAILED)" in screen
    assert "b: x differs" in screen
