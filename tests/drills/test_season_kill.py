"""Drill: `lb season close` killed with SIGKILL mid-way (a real process and its
JVM) leaves no award snapshot or a whole one, and the rerun gives the snapshot an
uninterrupted close gives (same hash). Real Redis, Spark and Delta; `make drills`
(moved from tests/jobs/test_season_kill.py, issue 22: 156 s of `make test`)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
import redis
from pyspark.sql import SparkSession

from conf.boards import load_boards
from conf.settings import Settings
from jobs.season import close_season
from serving.awards import rank_board as rank_awards
from serving.awards import read_version, season_dir, write_version
from tests.support.season import closed_season, lb_close_here
from tests.support.spark import SUBPROCESS_ENV

pytestmark = [pytest.mark.drills, pytest.mark.integration]

SCORES = {f"K{i:02d}": 10 * (i % 6) for i in range(18)}  # ties at every score


def reference_hash(cfg: Settings, tmp_path: Path) -> str:
    """The hash of an award snapshot of SCORES (eu players: global and eu boards),
    written in a scratch dir from the offline totals."""
    config = load_boards(cfg.boards_file)
    season = config.season("S9")
    assert season is not None
    players = pa.array(list(SCORES))
    scores = pa.array(list(SCORES.values()), pa.int64())
    tables = {
        f"season:S9:{scope}": rank_awards(players, scores, season)
        for scope in ("global", "eu")
    }
    empty = pa.table(
        {
            "player_id": pa.array([], pa.string()),
            "match_id": pa.array([], pa.string()),
            "board": pa.array([], pa.string()),
            "points": pa.array([], pa.int64()),
            "removed": pa.array([], pa.bool_()),
            "position": pa.array([], pa.int64()),
        }
    )
    version = write_version(
        tmp_path / "reference",
        season,
        1,
        tables,
        empty,
        generation="g0",
        boundary={},
        closed_at=datetime.now(UTC),
    )
    return version.hash


def lb_close(cfg: Settings) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    env |= {
        "LB_DATA_DIR": str(cfg.data_dir),
        "LB_REDIS_URL": cfg.redis_url or "",
        "LB_PARTITIONS": str(cfg.partitions),
        "LB_BOARDS_FILE": str(cfg.boards_file),
        **SUBPROCESS_ENV,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "season", "close", "S9"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group: the kill takes its JVM too
    )


def kill_when(process: subprocess.Popen[str], ready: Callable[[], bool]) -> bool:
    """SIGKILL the process group once ``ready()``; False if it ended first."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
            return True
        time.sleep(0.02)
    return False


def whole_or_none(cfg: Settings) -> str | None:
    """The snapshot's hash when one exists (then whole: every file its award.json
    names, with that sha256), else None; never a partial version."""
    version = read_version(cfg.data_dir, "S9")
    root = season_dir(cfg.data_dir, "S9")
    if version is None:
        names = [p.name for p in root.iterdir()] if root.is_dir() else []
        assert not any(n.startswith("v") for n in names), names
        return None
    for meta in version.meta["boards"].values():
        body = (version.directory / meta["file"]).read_bytes()
        assert hashlib.sha256(body).hexdigest() == meta["sha256"]
    return version.hash


def test_sigkill_mid_close_then_rerun_gives_the_same_snapshot(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    cfg = closed_season(settings, tmp_path, SCORES)
    expected = reference_hash(cfg, tmp_path)

    # Killed while landing: Delta bronze has begun, nothing is published yet.
    bronze_log = cfg.delta_dir / "bronze_events" / "_delta_log"
    first = lb_close(cfg)
    assert kill_when(first, lambda: bronze_log.is_dir()), first.communicate()[0]
    assert whole_or_none(cfg) is None

    # Killed once the final generation is visible: before or while the snapshot is
    # written; there is none, or a whole one.
    second = lb_close(cfg)
    killed = kill_when(second, lambda: any(cfg.segments_dir.glob("g*/manifest.json")))
    assert killed, second.communicate()[0]
    left = whole_or_none(cfg)
    assert left in (None, expected)

    # The rerun gives the uninterrupted close's snapshot: `lb season close` once
    # more, in this process (what it finds is on disk and in Redis, whichever
    # process looks); closing again returns the same snapshot.
    code, out = lb_close_here(cfg, monkeypatch, capfd)
    assert code == 0, out
    assert f"hash {expected}" in out, out
    snapshot = close_season(cfg, "S9", spark=spark)
    assert snapshot.hash == expected
    assert whole_or_none(cfg) == expected
    assert sorted(p.name for p in season_dir(cfg.data_dir, "S9").iterdir()) == ["v1"]
    table = read_version(cfg.data_dir, "S9", 1)
    assert table is not None
    got = table.board("season:S9:global")
    assert got is not None
    players, scores = got.column("player_id"), got.column("score")
    assert dict(zip(players.to_pylist(), scores.to_pylist(), strict=True)) == SCORES
