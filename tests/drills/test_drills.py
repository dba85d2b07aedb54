"""Fault drills (issue 7): real `lb up` stacks, kill -9 and SIGSTOP mid-load.

Each drill ends with the same checks (tests/drills/harness.py): every acknowledged
event is counted exactly once after redelivery, live and in the next generation, and
the partition logs hold exactly the positions their counters handed out. Bounded: a
few hundred events each. Run with `make drills` (also part of `make test`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.supervisor import stack_pids
from jobs.publish import run_publish
from jobs.segments import PublishAborted
from speed.rebase import rebase_published
from tests.drills.harness import (
    Load,
    Stack,
    assert_counted_once,
    assert_logs_match_counters,
    board_scores,
    expected_totals,
    make_events,
    publish_and_check,
    redeliver,
    wait_until,
)

pytestmark = [pytest.mark.drills, pytest.mark.e2e]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    made = Stack(tmp_path / "lb")
    yield made
    made.down()


def _after(load: Load, sent: int) -> None:
    assert wait_until(lambda: len(load.acked) >= sent, 60), (load.acked, load.failed)


def test_kill_9_of_the_api_supervisor_with_two_workers(
    stack: Stack, spark: Any
) -> None:
    stack.workers = 2
    token = stack.up()
    events = make_events(300, 40, "k")
    load = Load(stack.url, events).start()
    _after(load, 60)
    os.kill(stack.pid("api"), signal.SIGKILL)
    load.join()
    # The stack's supervisor ends the orphaned workers and Redis: nothing serves.
    stack.wait_stopped(token)
    assert load.failed, "premise: the kill happened mid-load"
    new_token = stack.up()
    assert new_token != token and not stack_pids(token)
    with stack.redis() as client:
        assert_logs_match_counters(client)
    redeliver(stack.url, events, load.acked)
    with stack.redis() as client:
        assert_logs_match_counters(client)
    assert_counted_once(stack.url, events)
    publish_and_check(stack, spark, events)
    with stack.redis() as client:
        assert_logs_match_counters(client)


def test_kill_9_of_redis_mid_load(stack: Stack, spark: Any) -> None:
    token = stack.up()
    events = make_events(300, 40, "r")
    load = Load(stack.url, events).start()
    _after(load, 60)
    os.kill(stack.pid("redis"), signal.SIGKILL)
    load.join()
    # Redis gone: the supervisor stops the API too rather than serve 503s forever.
    stack.wait_stopped(token)
    assert load.failed, "premise: the kill happened mid-load"
    stack.up()
    with stack.redis() as client:
        assert_logs_match_counters(client)
    redeliver(stack.url, events, load.acked)
    assert_counted_once(stack.url, events)
    publish_and_check(stack, spark, events)


def test_publish_killed_before_the_manifest_and_before_the_rebase(
    stack: Stack, spark: Any
) -> None:
    stack.up()
    first = make_events(120, 30, "p1")
    load = Load(stack.url, first).start()
    load.join()
    assert not load.failed
    settings = stack.settings()
    # Killed after its segments, before the manifest row: nothing becomes visible.
    with pytest.raises(PublishAborted):
        run_publish(settings, spark=spark, fail_at="before_manifest_row")
    assert board_scores(stack.url)[1]["generation"] is None
    assert_counted_once(stack.url, first)
    # Killed between the manifest and the rebase, twice in a row (with writes in
    # between): live reads stay exact on the old base, nothing counted twice.
    generation = run_publish(settings, spark=spark)
    second = make_events(120, 30, "p2")
    Load(stack.url, second).start().join()
    later = run_publish(settings, spark=spark)
    assert later != generation
    third = make_events(60, 30, "p3")
    Load(stack.url, third).start().join()
    everything = first + second + third
    assert_counted_once(stack.url, everything)
    with stack.redis() as client:
        assert_logs_match_counters(client)
    # The next full publish and rebase count everything exactly once.
    publish_and_check(stack, spark, everything)
    # A rebase onto the older generation, run late, switches nothing.
    late = rebase_published(settings, later).partitions
    assert late and "ok" not in late.values(), late
    assert_counted_once(stack.url, everything)


def test_stalled_redis_then_redelivery(stack: Stack, spark: Any) -> None:
    stack.up()
    before = make_events(50, 20, "s0")
    Load(stack.url, before).start().join()
    stalled = make_events(40, 20, "s1")
    redis_pid = stack.pid("redis")
    os.kill(redis_pid, signal.SIGSTOP)
    try:
        load = Load(stack.url, stalled, threads=4, timeout=1.5).start()
        # Bounded: the clients give up after 1.5 s each; resume after ~3 s.
        time.sleep(3)
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    load.join()
    assert load.failed, "premise: writes failed while Redis was stalled"
    for outcome in load.failed.values():
        # A client timeout, or a 503 saying the outcome is unknown.
        assert outcome in ("ReadTimeout", "WriteTimeout") or (
            outcome.startswith("503") and "unknown" in outcome
        ), outcome
    everything = before + stalled
    redeliver(stack.url, everything, load.acked | {e["eventId"] for e in before})
    assert_counted_once(stack.url, everything)
    assert httpx.get(f"{stack.url}/readyz").status_code == 200
    publish_and_check(stack, spark, everything)
    assert expected_totals(everything)
