"""`lb up` with several API workers: /metrics counts every worker's events in every
scrape, whichever worker answers (prometheus-client multiprocess mode)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest

from api.security import sign
from speed.server import free_port
from tests.conftest import event, open_windows_env
from tests.support.lb import lb

pytestmark = pytest.mark.e2e
EVENTS = 40


def _accepted(text: str) -> float:
    for line in text.splitlines():
        if line.startswith('lb_events_total{status="accepted"} '):
            return float(line.split()[-1])
    raise AssertionError("lb_events_total missing")


def test_metrics_sum_every_worker(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        LB_DATA_DIR=str(tmp_path / "lb"),
        LB_RATE_LIMIT="off",
        LB_API_WORKERS="2",
    )
    env |= open_windows_env(tmp_path / "conf")  # event() is dated November 2026
    env.pop("LB_REDIS_URL", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    port = free_port()
    started = lb("up", "--port", str(port), env=env)
    assert started.returncode == 0, started.stderr
    url = f"http://127.0.0.1:{port}"
    try:

        def post(i: int) -> int:
            body = orjson.dumps(event(eventId=f"W{i}", playerId=f"w{i}"))
            # A new connection per event, so the kernel spreads them over workers.
            with httpx.Client() as client:
                reply = client.post(
                    f"{url}/v1/score-events",
                    content=body,
                    headers={
                        "X-Key-Id": "dev",
                        "X-Signature": sign(b"dev-secret", body),
                    },
                )
            return reply.status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(post, range(EVENTS))) == {200}
        metrics_dir = tmp_path / "lb" / "run" / "prometheus"
        writers = {p.name for p in metrics_dir.glob("counter_*.db")}
        scrapes = []
        for _ in range(6):
            with httpx.Client() as client:
                scrapes.append(_accepted(client.get(f"{url}/metrics").text))
        # The premise: more than one process wrote counters.
        assert len(writers) >= 2, writers
        assert scrapes == [EVENTS] * 6
    finally:
        stopped = lb("down", env=env)
    assert stopped.returncode == 0, stopped.stderr
