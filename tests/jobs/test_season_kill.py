"""A season close whose landing is incomplete names what is missing (the SIGKILL
mid-close drill is tests/drills/test_season_kill.py). Real Redis, Spark and Delta."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from conf.settings import Settings
from jobs.season import SeasonError, close_season
from serving.awards import read_version
from speed.partitions import Keys
from tests.support.season import closed_season, lb_close_here

pytestmark = pytest.mark.integration

SCORES = {f"K{i:02d}": 10 * (i % 6) for i in range(18)}  # ties at every score


def test_close_with_incomplete_landing_names_what_is_missing(
    settings: Settings,
    redis_client: redis.Redis,
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    cfg = closed_season(settings, tmp_path, SCORES)
    # A position handed out on partition 1 whose record never reached the log (an
    # owner transaction lost mid-way): landing cannot get through it.
    through = int(redis_client.get(Keys(1).position) or 0)
    redis_client.incr(Keys(1).position)
    with pytest.raises(SeasonError) as refused:
        close_season(cfg, "S9", spark=spark)
    message = str(refused.value)
    assert message.startswith("incomplete: ")
    assert (
        f"partition 1 landed through {through}, positions up to {through + 1}"
        in message
    )
    assert "partition 0" not in message and "partition 2" not in message
    assert read_version(cfg.data_dir, "S9") is None
    # Run again (`lb season close`, what an operator does next): everything in the
    # log is landed now and the missing position still is not; named the same way,
    # one line, no traceback, exit code 1.
    code, out = lb_close_here(cfg, monkeypatch, capfd)
    assert code == 1, out
    (line,) = [x for x in out.splitlines() if x.startswith("lb season close: ")]
    assert line.startswith("lb season close: incomplete: partition 1: ")
    assert f"positions up to {through + 1} handed out" in line
    assert "Traceback" not in out and "unexpected error" not in out
