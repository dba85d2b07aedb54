"""The fault drills' harness: a real stack (`lb up`), concurrent signed writes, and
the checks every drill ends with.

The invariant each drill asserts: after redelivering every event that was not
acknowledged (same eventId and content, as a client must after a 503 or a timeout),
every event is counted exactly once, in the live answers and in the next generation,
and each partition's log holds exactly the positions its counter handed out.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import redis

from api.security import sign
from cli.supervisor import stack_pids, uvicorn_workers
from conf.settings import Settings
from speed.partitions import Keys
from speed.server import free_port
from tests.support.lb import lb as run_lb

BOARD = "alltime:all:global"
PARTITIONS = 4


def lb(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``tests.support.lb.lb`` with a drill's longer timeout (a stack under faults)."""
    return run_lb(*args, env=env, timeout=180)


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def make_events(count: int, players: int, tag: str) -> list[dict[str, Any]]:
    """``count`` new matches spread over ``players`` (one event per match)."""
    occurred = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {
            "eventId": f"{tag}-E{i}",
            "playerId": f"{tag}-P{i % players}",
            "matchId": f"{tag}-M{i}",
            "sourceRevision": 1,
            "occurredAt": occurred,
            "region": "eu",
            "result": {"points": 1 + (i * 7) % 50},
        }
        for i in range(count)
    ]


def expected_totals(events: list[dict[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for e in events:
        totals[e["playerId"]] = totals.get(e["playerId"], 0) + e["result"]["points"]
    return totals


@dataclass
class Stack:
    """One data dir and the `lb up` stacks started on it, one after another."""

    data_dir: Path
    workers: int = 1
    port: int = field(default_factory=free_port)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        env = dict(
            os.environ,
            LB_DATA_DIR=str(self.data_dir),
            LB_RATE_LIMIT="off",
            LB_PARTITIONS=str(PARTITIONS),
            LB_API_WORKERS=str(self.workers),
            **self.extra_env,
        )
        env.pop("LB_REDIS_URL", None)
        return env

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def run(self) -> Path:
        return self.data_dir / "run"

    def info(self) -> dict[str, Any]:
        return dict(json.loads((self.run / "stack.json").read_text()))

    def pid(self, name: str) -> int:
        return int((self.run / f"{name}.pid").read_text())

    def up(self) -> str:
        started = lb("up", "--port", str(self.port), env=self.env)
        assert started.returncode == 0, started.stderr
        token = str(self.info()["token"])
        assert httpx.get(f"{self.url}/healthz").json()["instance"] == token
        return token

    def down(self) -> None:
        lb("down", env=self.env)

    def settings(self) -> Settings:
        return Settings(
            data_dir=self.data_dir,
            redis_url=(self.run / "redis.url").read_text().strip(),
            partitions=PARTITIONS,
            rate_limit="off",
        )

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url((self.run / "redis.url").read_text().strip())

    def supervisor_state(self) -> dict[str, Any]:
        return dict(json.loads((self.run / "supervisor.json").read_text()))

    def restarts(self) -> dict[str, int]:
        return dict(self.supervisor_state()["restarts"])

    def workers_of(self, api_pid: int) -> list[int]:
        """uvicorn's worker processes, as the supervisor sees them."""
        return sorted(uvicorn_workers(api_pid))

    def wait_stopped(self, token: str) -> None:
        """No process of the stack with ``token`` runs and nothing answers the port."""
        assert wait_until(lambda: not stack_pids(token)), stack_pids(token)
        assert not answers(self.url)


def ready(url: str) -> bool:
    """``/readyz`` answers 200 (Redis reachable, writes acknowledged)."""
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=1)
    except httpx.HTTPError:
        return False
    return True


def post(client: httpx.Client, url: str, payload: dict[str, Any]) -> httpx.Response:
    body = orjson.dumps(payload)
    return client.post(
        f"{url}/v1/score-events",
        content=body,
        headers={"X-Key-Id": "dev", "X-Signature": sign(b"dev-secret", body)},
    )


class Load:
    """Sends events from a few threads; records which were acknowledged (200).

    With ``per_second`` the threads share one schedule, so a drill that must see the
    load still running after a restart (however long the restart takes on a busy
    machine) can pace a long list and ``stop()`` it when done; ``taken`` is then the
    events it actually sent, the ones the checks count.
    """

    def __init__(
        self,
        url: str,
        events: list[dict[str, Any]],
        threads: int = 4,
        timeout: float = 5.0,
        per_second: float | None = None,
    ) -> None:
        self.url = url
        self.events = events
        self.acked: set[str] = set()
        self.failed: dict[str, str] = {}
        self.timeout = timeout
        self.per_second = per_second
        self._next = 0
        self._stopped = False
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _take(self) -> dict[str, Any] | None:
        with self._lock:
            if self._stopped or self._next >= len(self.events):
                return None
            self._next += 1
            taken = self._next - 1
        if self.per_second is not None:
            due = self._started + taken / self.per_second
            time.sleep(max(0.0, due - time.monotonic()))
        return self.events[taken]

    @property
    def taken(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.events[: self._next]

    def stop(self) -> None:
        """Sends no further event; those already taken finish."""
        with self._lock:
            self._stopped = True

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while (event := self._take()) is not None:
                try:
                    reply = post(client, self.url, event)
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                else:
                    if reply.status_code == 200:
                        with self._lock:
                            self.acked.add(event["eventId"])
                        continue
                    outcome = f"{reply.status_code} {reply.text[:200]}"
                with self._lock:
                    self.failed[event["eventId"]] = outcome

    @property
    def sent(self) -> int:
        with self._lock:
            return self._next

    def start(self) -> Load:
        self._started = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=120)


class Reads:
    """Reads the top list from a few threads until stopped; records every answer
    (time, status, basis) and every transport error, so a drill can say whether
    reads answered throughout."""

    def __init__(self, url: str, threads: int = 2, pause: float = 0.01) -> None:
        self.url = url
        self.pause = pause
        self.answers: list[tuple[float, int, str | None]] = []
        # The bodies of answers other than 200 (a drill's failure then says why).
        self.refusals: list[tuple[float, int, str]] = []
        self.errors: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                at = time.monotonic()
                try:
                    reply = client.get(
                        f"{self.url}/v1/boards/{BOARD}/top", params={"limit": "10"}
                    )
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.errors.append((at, type(exc).__name__))
                else:
                    basis = None
                    if reply.status_code == 200:
                        basis = reply.json().get("basis")
                    with self._lock:
                        self.answers.append((at, reply.status_code, basis))
                        if reply.status_code != 200:
                            self.refusals.append(
                                (at, reply.status_code, reply.text[:300])
                            )
                time.sleep(self.pause)

    def start(self) -> Reads:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> Reads:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        return self

    def statuses(self) -> set[int]:
        return {status for _, status, _ in self.answers}

    def bases(self) -> set[str | None]:
        return {basis for _, status, basis in self.answers if status == 200}

    def longest_gap(self) -> float:
        """Longest time without a 200 answer while reading."""
        times = sorted(at for at, status, _ in self.answers if status == 200)
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0)


def redeliver(url: str, events: list[dict[str, Any]], acked: set[str]) -> None:
    """Send every event again; each must answer 200: ``duplicate`` for those that
    were acknowledged (their saved result), ``accepted`` or ``duplicate`` for the
    rest (a failed write's outcome is unknown)."""
    with httpx.Client(timeout=30) as client:
        for event in events:
            reply = post(client, url, event)
            assert reply.status_code == 200, (event["eventId"], reply.text)
            status = reply.json()["status"]
            if event["eventId"] in acked:
                assert status == "duplicate", (event["eventId"], status)
            else:
                assert status in ("accepted", "duplicate"), status


def assert_logs_match_counters(client: redis.Redis) -> None:
    """Each partition's log ends at its position counter, with no gap after the
    landed position."""
    for partition in range(PARTITIONS):
        keys = Keys(partition)
        position = int(client.get(keys.position) or 0)
        landed = int(client.get(keys.landed) or 0)
        # This client answers bytes (no decode_responses); redis-py types the
        # reply for both kinds of client.
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(keys.log))
        ids = [int(entry_id.split(b"-")[0]) for entry_id, _ in entries]
        assert ids == list(range(landed + 1, position + 1)), (partition, landed, ids)


def board_scores(url: str, **params: str) -> tuple[dict[str, int], dict[str, Any]]:
    body = httpx.get(
        f"{url}/v1/boards/{BOARD}/top", params={"limit": "1000", **params}, timeout=30
    ).json()
    # An error answer fails with what it said (a drill once got one here).
    assert "entries" in body, body
    return {e["playerId"]: e["score"] for e in body["entries"]}, body


def assert_counted_once(url: str, events: list[dict[str, Any]]) -> None:
    """Live: every player's total equals the sum of its events, each counted once."""
    expected = expected_totals(events)
    live, body = board_scores(url)
    assert (body["exactness"], body["basis"]) == ("exact", "live"), body
    assert live == expected
    assert body["population"] == len(expected)


def publish_and_check(stack: Stack, spark: Any, events: list[dict[str, Any]]) -> str:
    """Publish a generation in-process and rebase: the snapshot and live reads both
    count every event exactly once."""
    from jobs.publish import run_publish
    from speed.rebase import rebase_published

    settings = stack.settings()
    generation = run_publish(settings, spark=spark)
    report = rebase_published(settings, generation)
    assert set(report.partitions.values()) == {"ok"}, report
    expected = expected_totals(events)

    # The API notices a new generation on its next scan of the segments directory
    # (serving/registry.py, at most every REFRESH_SECONDS); a read right after the
    # publish may still be answered from the scan before it (twice a drill got
    # "no generation has been published yet" here, sessions 24 and 27).
    def noticed() -> bool:
        body = httpx.get(
            f"{stack.url}/v1/boards/{BOARD}/top",
            params={"limit": "1", "mode": "snapshot"},
            timeout=30,
        ).json()
        return bool(body.get("generation", {}).get("id") == generation)

    assert wait_until(noticed, 10), generation
    snapshot, body = board_scores(stack.url, mode="snapshot")
    assert body["generation"]["id"] == generation
    assert snapshot == expected
    assert wait_until(
        lambda: board_scores(stack.url)[1]["generation"]["id"] == generation, 10
    )
    assert_counted_once(stack.url, events)
    return generation
