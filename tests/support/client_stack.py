"""The client libraries' stack: one ``lb up`` (Redis + the API over TCP) with the
seed events in its speed layer and a generation of the same totals, shared by the
Python and the TypeScript client tests (fixture ``client_stack`` in
tests/conftest.py).

The generation is written by the tests' serving-format writer
(``tests.support.segments``), not by ``lb publish``: the clients read what the API
serves from a generation (snapshot labels, cursors over one generation) and need no
Spark JVM for it (a publish costs minutes of ``make test`` on a loaded machine; the
publisher has its own tests in tests/jobs and tests/e2e)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from api.security import sign
from conf.settings import LOCAL_PLAYER_TOKEN_KEY
from speed.server import free_port
from tests.support.lb import lb, stack_env
from tests.support.segments import write_generation

BOARD = "alltime:all:global"
KEY_ID = "dev"
SECRET = "dev-secret"
PLAYER_TOKEN_KEY = LOCAL_PLAYER_TOKEN_KEY
# A per-player bucket small enough for a test to reach (the 6th new match in a
# minute answers 429); every other test sends at most a few matches per player.
RATE_LIMIT = "5/60"
SEED_PLAYERS = 23


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def occurred(minutes_ago: int = 5) -> str:
    """An ``occurredAt`` a few minutes ago: inside every window on any date."""
    moment = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seed_events() -> list[dict[str, Any]]:
    """One match per seed player, points with ties (``seed-P3`` and ``seed-P10``
    share a score, and so on)."""
    when = occurred()
    return [
        {
            "eventId": f"seed-E{i}",
            "playerId": f"seed-P{i}",
            "matchId": f"seed-M{i}",
            "sourceRevision": 1,
            "occurredAt": when,
            "region": "eu" if i % 2 else "na",
            "result": {"points": 10 * (i % 7) + 5},
        }
        for i in range(SEED_PLAYERS)
    ]


@dataclass
class ClientStack:
    data_dir: Path
    port: int = field(default_factory=free_port)
    generation: str = ""
    seeded: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = stack_env(self.data_dir, LB_PARTITIONS="2", LB_API_WORKERS="1")
        env["LB_RATE_LIMIT"] = RATE_LIMIT
        return env

    def up(self) -> None:
        started = lb("up", "--port", str(self.port), env=self.env)
        assert started.returncode == 0, started.stderr

    def seed(self) -> None:
        """The seed events through a plain signed POST (not through a client under
        test), then a generation of their totals."""
        body = orjson.dumps({"events": seed_events()})
        reply = httpx.post(
            f"{self.url}/v1/score-events:batch",
            content=body,
            headers={"X-Key-Id": KEY_ID, "X-Signature": sign(SECRET.encode(), body)},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        results = reply.json()["results"]
        assert all(r.get("status") == "accepted" for r in results), results
        self.seeded = {e["playerId"]: e["result"]["points"] for e in seed_events()}
        self.generation = write_generation(
            self.data_dir / "segments",
            1,
            {BOARD: self.seeded},
            boundary={"0": 0, "1": 0},
            bucket_target=4,
        )
        assert wait_until(self._serves_generation, timeout=120), self.generation

    def _serves_generation(self) -> bool:
        reply = httpx.get(
            f"{self.url}/v1/boards/{BOARD}/top",
            params={"mode": "snapshot", "limit": 1},
            timeout=10,
        )
        body = reply.json() if reply.status_code == 200 else {}
        return (body.get("generation") or {}).get("id") == self.generation

    def down(self) -> None:
        lb("down", env=self.env)

    def expected_snapshot(self) -> list[tuple[str, int]]:
        """The seed players in display order of the board (score desc, then id)."""
        return sorted(self.seeded.items(), key=lambda kv: (-kv[1], kv[0].encode()))
