"""`lb up` heals itself (issue 23, item 2), as fault drills (`make drills`, which
CI runs on every landing): a Redis killed with -9 is restarted on its own AOF while
reads answer from the latest generation (``basis: snapshot``) and writes answer
503; only repeated failures stop the stack, with the reason in `lb status`. A
killed API worker or uvicorn supervisor under load: tests/drills/test_drills.py."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.drills.harness import (
    BOARD,
    Load,
    Stack,
    assert_counted_once,
    board_scores,
    expected_totals,
    lb,
    make_events,
    post,
    publish_and_check,
    ready,
    redeliver,
    wait_until,
)

pytestmark = [pytest.mark.drills, pytest.mark.e2e]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    made = Stack(tmp_path / "lb", extra_env={"LB_RESTART_LIMIT": "10/60"})
    yield made
    made.down()


def _aof_file(stack: Stack) -> Path:
    files = sorted((stack.data_dir / "redis" / "appendonlydir").glob("*.aof"))
    assert files, "premise: Redis keeps an AOF"
    return files[-1]


def test_redis_killed_under_lb_up_is_restarted_on_its_aof(
    stack: Stack, spark: Any
) -> None:
    stack.workers = 2
    token = stack.up()
    first = make_events(80, 20, "h1")
    load = Load(stack.url, first).start()
    load.join()
    assert not load.failed, load.failed
    generation = publish_and_check(stack, spark, first)
    second = make_events(40, 20, "h2")
    load = Load(stack.url, second).start()
    load.join()
    assert not load.failed, load.failed
    published = expected_totals(first)
    redis_pid = stack.pid("redis")

    # While this test holds the AOF open, the supervisor must not start Redis on
    # it: the outage lasts as long as we hold it (its retries back off meanwhile).
    with _aof_file(stack).open("rb"):
        os.kill(redis_pid, signal.SIGKILL)
        assert wait_until(lambda: not Path(f"/proc/{redis_pid}/stat").exists(), 10)
        started = time.monotonic()
        top = httpx.get(f"{stack.url}/v1/boards/{BOARD}/top", params={"limit": 1000})
        assert time.monotonic() - started < 2
        assert top.status_code == 200, top.text
        body = top.json()
        assert (body["basis"], body["liveLayer"]) == ("snapshot", "unavailable")
        assert body["generation"]["id"] == generation
        assert {e["playerId"]: e["score"] for e in body["entries"]} == published
        with httpx.Client(timeout=10) as client:
            write = post(client, stack.url, make_events(1, 1, "down")[0])
        assert write.status_code == 503 and "Retry-After" in write.headers
        readiness = httpx.get(f"{stack.url}/readyz")
        assert readiness.status_code == 503
        detail = readiness.json()["detail"]
        assert f"reads answer from generation {generation}" in detail
        # Still down, and no second Redis was started on the held AOF.
        time.sleep(1.0)
        assert httpx.get(f"{stack.url}/readyz").status_code == 503
        failed = [e["reason"] for e in stack.supervisor_state()["events"]]
        assert any("still open by pid" in r for r in failed), failed

    assert wait_until(lambda: ready(stack.url), 30), stack.supervisor_state()
    assert stack.pid("redis") != redis_pid
    # The API reconnects as soon as Redis answers; the supervisor records
    # "running" once its own readiness check of the new Redis has passed.
    assert wait_until(lambda: stack.supervisor_state()["state"] == "running", 30)
    state = stack.supervisor_state()
    assert state["restarts"]["redis"] >= 2, state
    assert stack.info()["token"] == token  # the same stack, healed

    # Writes work again; every acknowledged event is counted exactly once.
    third = make_events(40, 20, "h3")
    load = Load(stack.url, third).start()
    load.join()
    assert not load.failed, load.failed
    everything = first + second + third
    redeliver(stack.url, everything, {e["eventId"] for e in everything})
    assert_counted_once(stack.url, everything)

    status = lb("status", env=stack.env)
    assert status.returncode == 0, status.stderr
    assert "supervisor  running" in status.stdout
    assert "redis-server was killed by SIGKILL" in status.stdout
    metrics = httpx.get(f"{stack.url}/metrics").text
    restarts = state["restarts"]["redis"]
    assert f'lb_supervisor_restarts_total{{process="redis"}} {restarts}.0' in metrics
    publish_and_check(stack, spark, everything)


def test_repeated_failures_stop_the_stack_with_the_reason_in_status(
    tmp_path: Path,
) -> None:
    stack = Stack(tmp_path / "lb", extra_env={"LB_RESTART_LIMIT": "1/60"})
    try:
        token = stack.up()
        first = stack.pid("redis")
        os.kill(first, signal.SIGKILL)
        assert wait_until(lambda: stack.pid("redis") != first, 20)
        assert wait_until(lambda: ready(stack.url), 30)
        # A second death within the window spends the budget: the stack stops.
        os.kill(stack.pid("redis"), signal.SIGKILL)
        stack.wait_stopped(token)
        status = lb("status", env=stack.env)
        assert status.returncode == 0, status.stderr
        assert "supervisor  stopped" in status.stdout
        assert "more than 1 restarts of redis within 60 s" in status.stdout
        assert "LB_RESTART_LIMIT=1/60" in status.stdout
        # A new `lb up` starts on the same AOF.
        stack.up()
        scores, body = board_scores(stack.url)
        assert body["basis"] == "live" and scores == {}
    finally:
        stack.down()
