"""A reject-only adjudication (no event accepted) gives award version N + 1 with no
change, through the admin endpoint and through `lb season adjudicate` (issue 23:
both answered 500 / exit 70 on an empty untyped Arrow array). Real Redis; the award
version 1 is written directly, so no Spark is needed."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from cli.main import main as cli_main
from conf.boards import load_boards
from conf.settings import Settings
from serving.awards import CONTRIBUTION_SCHEMA, rank_board, read_version, write_version
from tests.support.clients import ADMIN_SECRET, SignedClient, admin_get
from tests.support.season import board_status, post, season_settings

pytestmark = pytest.mark.integration

BOARD = "season:S9:global"


def test_reject_only_adjudication_admin_and_cli(
    settings: Settings,
    redis_client: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    end = datetime.now(UTC) - timedelta(hours=1)
    cfg = season_settings(settings, tmp_path, end)
    season = load_boards(cfg.boards_file).season("S9")
    assert season is not None
    write_version(
        cfg.data_dir,
        season,
        1,
        {
            BOARD: rank_board(
                pa.array(["P1", "P2"], pa.string()),
                pa.array([100, 90], pa.int64()),
                season,
            )
        },
        CONTRIBUTION_SCHEMA.empty_table(),
        generation="g0",
        boundary={},
        closed_at=end,
    )
    played = end - timedelta(minutes=10)
    with TestClient(create_app(cfg)) as client:
        api = SignedClient(client)
        for player in ("P3", "P4"):
            body = post(api, player, "M1", 500, played)
            assert board_status(body, BOARD) == "late-review"
        late = admin_get(api, "/v1/admin/seasons/S9/late-review").json()["events"]
        assert sorted(e["eventId"] for e in late) == ["P3-M1", "P4-M1"]

        # The admin endpoint: reject only -> version 2, nothing changes.
        admin = SignedClient(client, "admin", ADMIN_SECRET)
        reply = admin.post(
            "/v1/admin/seasons/S9/adjudications",
            {"reject": ["P3-M1"], "reason": "not verified"},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["version"] == 2
        assert reply.json()["changes"] == []
        awards = api.get(f"/v1/boards/{BOARD}/awards").json()
        assert awards["version"] == 2
        assert [(e["playerId"], e["score"]) for e in awards["entries"]] == [
            ("P1", 100),
            ("P2", 90),
        ]
        late = admin_get(api, "/v1/admin/seasons/S9/late-review").json()["events"]
        assert [e["eventId"] for e in late] == ["P4-M1"]

    # The CLI: `lb season adjudicate S9 --reject P4-M1 --reason r`, in this process
    # and without Spark (landing into gold_awards is tested in test_season.py).
    monkeypatch.setattr("jobs.spark.get_spark", lambda *a, **k: None)
    for name in [k for k in os.environ if k.startswith("LB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("LB_DATA_DIR", str(cfg.data_dir))
    monkeypatch.setenv("LB_REDIS_URL", cfg.redis_url or "")
    monkeypatch.setenv("LB_PARTITIONS", str(cfg.partitions))
    monkeypatch.setenv("LB_BOARDS_FILE", str(cfg.boards_file))
    capfd.readouterr()
    code = cli_main(
        ["season", "adjudicate", "S9", "--reject", "P4-M1", "--reason", "r"]
    )
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert "award version 3" in out
    version = read_version(cfg.data_dir, "S9")
    assert version is not None and version.version == 3
    assert version.meta["changes"] == []
    assert version.meta["adjudication"]["rejected"] == [["P4", "P4-M1"]]
