"""Fault drills (issue 7): real `lb up` stacks, kill -9 and SIGSTOP mid-load.

Each drill ends with the same checks (tests/drills/harness.py): every acknowledged
event is counted exactly once after redelivery, live and in the next generation, and
the partition logs hold exactly the positions their counters handed out. Bounded: a
few hundred events each. Run with `make drills` (CI runs it after `make test`,
which leaves them out).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobs.publish import run_publish
from jobs.segments import PublishAborted
from serving.registry import GenerationRegistry
from speed.rebase import rebase_published
from tests.drills.harness import (
    Load,
    Reads,
    Stack,
    assert_counted_once,
    assert_logs_match_counters,
    board_scores,
    expected_totals,
    make_events,
    publish_and_check,
    ready,
    redeliver,
    wait_until,
)
from tests.drills.killed_publish import PHASES

pytestmark = [pytest.mark.drills, pytest.mark.e2e]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    made = Stack(tmp_path / "lb")
    yield made
    made.down()


def _after(load: Load, sent: int) -> None:
    assert wait_until(lambda: len(load.acked) >= sent, 60), (load.acked, load.failed)


def test_kill_9_of_an_api_worker_then_of_uvicorns_supervisor_under_load(
    stack: Stack, spark: Any
) -> None:
    stack.workers = 2
    token = stack.up()
    # Paced and stopped by the drill: the load must still be running after the
    # restart, however long the restart takes on a busy machine (bounded: at most
    # 3,000 events, 60 s).
    load = Load(stack.url, make_events(3000, 40, "k"), per_second=50)
    reads = Reads(stack.url).start()
    try:
        load.start()
        _after(load, 60)
        api_pid = stack.pid("api")
        worker = stack.workers_of(api_pid)[0]
        killed_at = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        # uvicorn starts a new worker, the supervisor counts it; the other worker
        # kept answering reads meanwhile.
        assert wait_until(lambda: worker in _died_workers(stack), 15), _why(stack)
        assert wait_until(lambda: worker not in stack.workers_of(api_pid), 15)
        _after(load, len(load.acked) + 40)
        gap = _longest_gap_since(reads, killed_at)
        assert gap < 2.0, gap
        # Then uvicorn's own supervisor: the stack's supervisor ends the orphaned
        # workers and starts the API again (the same stack, no `lb up`).
        orphans = stack.workers_of(api_pid)
        assert orphans, "premise: uvicorn had started a new worker"
        os.kill(api_pid, signal.SIGKILL)
        # The orphaned workers still hold the listening socket for a moment, so
        # "ready" alone can be the old API answering: wait for the new one.
        assert wait_until(lambda: _api_replaced(stack, api_pid), 60)
        assert wait_until(
            lambda: not any(Path(f"/proc/{w}/stat").exists() for w in orphans), 30
        ), orphans
    finally:
        load.stop()
        load.join()
        reads.stop()
    events = load.taken
    assert stack.info()["token"] == token and stack.pid("api") != api_pid
    # Counted: the killed worker, the API, and any other worker uvicorn itself
    # replaced (one that missed its health check on a loaded machine is killed and
    # started again: a restart too). Each worker counted as died must be gone: a
    # live one was the resource tracker read before its exec (cli/supervisor.py
    # uvicorn_workers), counted as a third restart in a clean-clone CI.
    died = _died_workers(stack)
    assert worker in died, _why(stack)
    assert not [p for p in died if Path(f"/proc/{p}/stat").exists()], _why(stack)
    assert stack.restarts()["api"] == 1 + len(died), _why(stack)
    if len(died) > 1:
        print(f"uvicorn replaced {len(died) - 1} more worker(s): {_why(stack)}")
    metrics = httpx.get(f"{stack.url}/metrics").text
    restarts = stack.restarts()["api"]
    assert f'lb_supervisor_restarts_total{{process="api"}} {restarts:.1f}' in metrics
    assert load.failed, "premise: the kills happened mid-load"
    assert reads.statuses() == {200}, (reads.statuses(), reads.refusals[:5])
    with stack.redis() as client:
        assert_logs_match_counters(client)
    redeliver(stack.url, events, load.acked)
    assert_counted_once(stack.url, events)
    publish_and_check(stack, spark, events)
    with stack.redis() as client:
        assert_logs_match_counters(client)


def _died_workers(stack: Stack) -> list[int]:
    """The API workers the stack's supervisor counted as died, oldest first."""
    return [
        event["worker"]
        for event in stack.supervisor_state()["events"]
        if "worker" in event
    ]


def _why(stack: Stack) -> str:
    """What the supervisor counted, and the end of the API's own log (uvicorn names
    each worker it replaced)."""
    state = stack.supervisor_state()
    log = stack.run / "api.log"
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    return f"restarts {state['restarts']}, events {state['events']}, api.log: {tail}"


def _api_replaced(stack: Stack, old_pid: int) -> bool:
    try:
        replaced = stack.pid("api") != old_pid
    except (FileNotFoundError, ValueError):  # the supervisor is mid-restart
        return False
    return replaced and ready(stack.url)


def _longest_gap_since(reads: Reads, since: float) -> float:
    times = sorted(at for at, status, _ in list(reads.answers) if status == 200)
    times = [since] + [t for t in times if t >= since]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


def test_kill_9_of_redis_under_write_load_heals(stack: Stack, spark: Any) -> None:
    token = stack.up()
    first = make_events(100, 40, "r0")
    Load(stack.url, first).start().join()
    generation = publish_and_check(stack, spark, first)
    events = make_events(400, 40, "r")
    reads = Reads(stack.url).start()
    try:
        load = Load(stack.url, events).start()
        _after(load, 60)
        redis_pid = stack.pid("redis")
        os.kill(redis_pid, signal.SIGKILL)
        # The supervisor starts Redis again on its AOF; the load goes on.
        assert wait_until(lambda: stack.restarts()["redis"] == 1, 15)
        assert wait_until(lambda: ready(stack.url), 30)
        load.join()
    finally:
        reads.stop()
    assert stack.info()["token"] == token and stack.pid("redis") != redis_pid
    assert load.failed, "premise: the kill happened mid-load"
    for outcome in load.failed.values():
        # 503 (outcome unknown) or a transport error; never another status.
        assert outcome.startswith("503") or not outcome[:1].isdigit(), outcome
    # Reads answered throughout: live before and after, the generation between.
    assert reads.statuses() == {200}, (reads.statuses(), reads.refusals[:5])
    assert reads.bases() <= {"live", "snapshot"}, reads.bases()
    snapshot = [b for _, _, b in reads.answers if b == "snapshot"]
    print(f"reads: {len(reads.answers)}, from {generation} while down: {len(snapshot)}")
    assert reads.longest_gap() < 3.0, reads.longest_gap()
    everything = first + events
    with stack.redis() as client:
        assert_logs_match_counters(client)
    redeliver(stack.url, everything, load.acked | {e["eventId"] for e in first})
    assert_counted_once(stack.url, everything)
    publish_and_check(stack, spark, everything)


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


def _latest(stack: Stack) -> str | None:
    latest = GenerationRegistry(stack.settings().segments_dir, 3).latest()
    return None if latest is None else latest.id


@pytest.mark.timeout(1800)  # four Spark JVMs started: slow on a loaded machine
def test_spark_jvm_killed_in_each_publish_phase_then_a_rerun(
    stack: Stack, spark: Any
) -> None:
    """One killed `lb publish` per phase, each starting from what the previous
    one left (a partition landed and trimmed, gold rows of a generation without
    segments, segments without a manifest row), then one rerun."""
    stack.up()
    everything: list[dict[str, Any]] = []
    reads = Reads(stack.url, threads=1, pause=0.05).start()
    try:
        for phase in PHASES:
            batch = make_events(60, 30, f"j{phase[:3]}")
            load = Load(stack.url, batch).start()
            load.join()
            assert not load.failed, load.failed
            everything += batch
            before = _latest(stack)
            killed = subprocess.run(
                [sys.executable, "-m", "tests.drills.killed_publish", phase],
                env=stack.env,
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert f"killed {phase}" in killed.stdout, killed.stdout + killed.stderr
            assert killed.returncode != 0, killed.stdout
            # Nothing half-published became visible; live reads stay exact.
            assert _latest(stack) == before
            assert_counted_once(stack.url, everything)
        publish_and_check(stack, spark, everything)
    finally:
        reads.stop()
    assert reads.statuses() == {200}, (reads.statuses(), reads.refusals[:5])
    with stack.redis() as client:
        assert_logs_match_counters(client)


def _fill(path: Path) -> int:
    """Write ``path`` until its filesystem is full; returns the bytes written."""
    chunk = b"\0" * (1 << 20)
    written = 0
    with path.open("wb", buffering=0) as out:
        while True:
            try:
                written += out.write(chunk) or 0
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        # The last partial chunk: fill the remaining bytes too.
        for size in (1 << 16, 1 << 12, 1):
            while True:
                try:
                    written += out.write(b"\0" * size) or 0
                except OSError:
                    break
    return written


@pytest.mark.timeout(1800)
def test_full_disk_during_publish(tmp_path: Path, spark: Any) -> None:
    """The segments' filesystem fills up during a publish: it fails, the previous
    generation keeps answering, nothing is lost; once space is back, the rerun
    counts every event exactly once."""
    stack = Stack(tmp_path / "lb")
    # LB_DATA_DIR/segments on a 16 MB filesystem. The filler lives beside it, not
    # in it: a publish removes whatever in segments/ is not a generation.
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0750", "tmpfs", str(tiny)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(
            "a full disk needs a small tmpfs, and mounting one failed (root and "
            f"CAP_SYS_ADMIN are needed): {mounted.stderr.strip()}"
        )
    segments = tiny / "segments"
    try:
        segments.mkdir()
        stack.data_dir.mkdir()
        (stack.data_dir / "segments").symlink_to(segments)
        stack.up()
        first = make_events(100, 40, "d1")
        Load(stack.url, first).start().join()
        generation = publish_and_check(stack, spark, first)
        assert _fill(tiny / "filler") > 0
        second = make_events(100, 40, "d2")
        load = Load(stack.url, second).start()
        load.join()
        assert not load.failed, load.failed
        reads = Reads(stack.url, threads=1, pause=0.05).start()
        try:
            with pytest.raises(Exception) as failed:  # noqa: B017 - any error will do
                run_publish(stack.settings(), spark=spark)
            assert _latest(stack) == generation
            assert_counted_once(stack.url, first + second)
        finally:
            reads.stop()
        print(f"publish on a full disk: {type(failed.value).__name__}")
        assert reads.statuses() == {200}, (reads.statuses(), reads.refusals[:5])
        (tiny / "filler").unlink()
        publish_and_check(stack, spark, first + second)
        with stack.redis() as client:
            assert_logs_match_counters(client)
    finally:
        stack.down()
        subprocess.run(["umount", "-l", str(tiny)], check=False)
