"""`make cluster-demo` end to end: Spark standalone with two workers, a Redis
Cluster of three masters, two APIs and Airflow standalone play a short season
through the DAGs, and the demo's own checks (live top, the scheduler's publish
run, the season_close run's award snapshot, all against an offline sort) hold.

Slow (about ten minutes on two cores, most of it Airflow's and Spark's start-up):
`make test SLOW=1` runs it; `make test` runs the demo's season and checks below
in `tests/cli/test_cluster_demo_season.py`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_cluster_demo_plays_a_season_on_every_distributed_engine(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli.cluster_demo", "--dir", str(tmp_path / "demo")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    assert "cluster demo OK" in out
    for part in (
        "spark master",
        "worker0",
        "worker1",
        "redis master 2",
        "api-2",
        "airflow",
    ):
        assert part in out, out[-3000:]
    assert "publish_generation" in out and "season_close" in out
    # Everything it started has stopped: no process still runs from its directory.
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "demo")], capture_output=True, text=True
    )
    assert leftovers.stdout.strip() == "", leftovers.stdout
