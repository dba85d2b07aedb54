"""The API process does not load the batch layer: building the app and answering
``/metrics`` (which reads the last verify result and the award files) imports
neither ``pyspark`` nor any ``jobs`` module. Checked in a fresh interpreter, so
nothing another test imported counts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conf.settings import Settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
from datetime import timedelta

from fastapi.testclient import TestClient

from api.main import create_app
from conf.settings import Settings
from serving.verify_state import write_last_verify

settings = Settings(
    redis_url=sys.argv[1],
    data_dir=sys.argv[2],
    partitions=4,
    rate_limit="off",
    boards_file=sys.argv[3],
    dedupe_window=timedelta(days=int(sys.argv[4])),
)
write_last_verify(
    settings,
    {"run_id": "r1", "finished_at": "2026-01-01T00:00:00+00:00",
     "divergences": ["a", "b"], "ok": False, "divergenceCount": 2},
)
with TestClient(create_app(settings)) as client:
    reply = client.get("/metrics")
assert reply.status_code == 200, reply.text
assert "lb_verify_divergences 2.0" in reply.text, reply.text
loaded = sorted(
    name for name in sys.modules
    if name.split(".")[0] in ("pyspark", "py4j", "delta", "jobs")
)
print("LOADED", loaded)
"""


def test_metrics_load_neither_pyspark_nor_jobs(settings: Settings) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            settings.redis_url,
            str(settings.data_dir),
            str(settings.boards_file),
            str(settings.dedupe_window.days),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout, out.stdout
