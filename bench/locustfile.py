"""A load test users can point at any deployment (Locust, seed 004's shape).

    make loadtest HOST=http://10.0.0.5:8080 USERS=50 RUN_TIME=60s
    # = locust -f bench/locustfile.py --headless --host HOST -u USERS -r ... -t ...

Two kinds of users share the run (weights 1 : 4):

- ``GameServer``: signed writes (``X-Key-Id``/``X-Signature``, key ``--lb-key``,
  default the local ``dev:dev-secret``), batches of ``--lb-batch`` events (default
  10) of which ``--lb-redeliver`` (default 3 %) are redeliveries of an acknowledged
  event (same eventId and content: must answer ``duplicate``), plus single POSTs of a
  new event sent twice (the second must answer ``duplicate``). Players are
  ``lt-<run>-P<n>`` (``--lb-players``, default 5,000), so the run's own players are
  checked whatever else the deployment holds; events are dated now, on the
  all-time board (``--lb-board``) that never closes.
- ``Reader``: top-100 (50 %), a player's rank (30 %) and nearby (20 %), live reads
  of players the run has written.

A write whose answer never came (a 503, a timeout, a reset) has an unknown outcome:
it is kept and redelivered at the end, as a client must, until it is answered. At
the end, every acknowledged event must count exactly once: for each player the run
acknowledged, the live score on the board must equal the sum of its acknowledged
events' points (each eventId once, however often it was sent). The check prints a
summary after Locust's and sets the exit code to 1 on any mismatch, any 5xx that
stayed unresolved, or a redelivery that did not answer ``duplicate``.

Run it in one process (no ``--processes``): the expected totals live in it.
Needs ``locust`` (``make loadtest`` installs it) and the Python client
(clients/python, on ``PYTHONPATH``).
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from leaderboard_client import EventResult, LeaderboardClient, NotFound, sign
from leaderboard_client.client import encode
from locust import FastHttpUser, between, events, task

STATE_LOCK = threading.Lock()
# The end's check reads through the Python client (httpx): one line per request
# would drown the summary.
logging.getLogger("httpx").setLevel(logging.WARNING)


class RunState:
    """What the run sent and what the service acknowledged (one process)."""

    def __init__(self) -> None:
        self.run = f"{int(time.time())}-{os.getpid()}"
        self.ids = itertools.count()
        self.points: dict[str, tuple[str, int]] = {}  # eventId -> (player, points)
        self.counted: set[str] = set()  # acknowledged eventIds (counted once)
        self.expected: dict[str, int] = {}  # player -> expected total
        self.bodies: dict[str, dict[str, Any]] = {}  # acknowledged events, to resend
        self.acked_ids: list[str] = []
        self.unknown: dict[str, dict[str, Any]] = {}  # outcome unknown: redeliver
        self.stats: Counter[str] = Counter()

    def new_event(self, players: int) -> dict[str, Any]:
        n = next(self.ids)
        player = f"lt-{self.run}-P{random.randrange(players)}"
        points = random.randrange(1, 200)
        event: dict[str, Any] = {
            "eventId": f"lt-{self.run}-E{n}",
            "playerId": player,
            "matchId": f"lt-{self.run}-M{n}",
            "sourceRevision": 1,
            "occurredAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": random.choice(("eu", "na")),
            "result": {"points": points},
        }
        with STATE_LOCK:
            self.points[event["eventId"]] = (player, points)
        return event

    def acknowledge(self, event: dict[str, Any], status: str) -> None:
        """An answer with a status: the event is applied once (``accepted``, or
        ``duplicate`` of an acceptance whose answer was lost)."""
        event_id = event["eventId"]
        with STATE_LOCK:
            self.unknown.pop(event_id, None)
            self.stats[f"status {status}"] += 1
            if event_id in self.counted or status not in ("accepted", "duplicate"):
                return
            self.counted.add(event_id)
            player, points = self.points[event_id]
            self.expected[player] = self.expected.get(player, 0) + points
            self.bodies[event_id] = event
            self.acked_ids.append(event_id)

    def in_flight(self, batch: list[dict[str, Any]]) -> None:
        """Before sending: until an answer says what happened, the outcome of
        each event not yet counted is unknown (a request cut off when the run
        stops included), so the end redelivers it."""
        with STATE_LOCK:
            for event in batch:
                if event["eventId"] not in self.counted:
                    self.unknown[event["eventId"]] = event

    def refused(self, event: dict[str, Any], code: str) -> None:
        """A definite refusal (nothing applied): not acknowledged, not pending."""
        with STATE_LOCK:
            self.unknown.pop(event["eventId"], None)
            self.stats[f"refused {code}"] += 1

    def some_acked(self, count: int) -> list[dict[str, Any]]:
        with STATE_LOCK:
            if not self.acked_ids:
                return []
            picks = random.choices(self.acked_ids, k=count)
            return [self.bodies[i] for i in picks]

    def some_player(self) -> str | None:
        with STATE_LOCK:
            if not self.acked_ids:
                return None
            return self.points[random.choice(self.acked_ids)][0]


STATE = RunState()


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--lb-key", default="dev:dev-secret", help="keyId:secret")
    parser.add_argument("--lb-board", default="alltime:all:global")
    parser.add_argument("--lb-players", type=int, default=5000)
    parser.add_argument("--lb-batch", type=int, default=10)
    parser.add_argument("--lb-redeliver", type=float, default=0.03)


def _option(environment: Any, name: str) -> Any:
    return getattr(environment.parsed_options, name)


class GameServer(FastHttpUser):  # type: ignore[misc]
    weight = 1
    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        key_id, _, secret = _option(self.environment, "lb_key").partition(":")
        self.key_id, self.secret = key_id, secret.encode()

    def _post(self, path: str, body: bytes, name: str) -> tuple[int, Any]:
        """(status, JSON of a 200 or None); a 429 is the deployment's rate limit,
        not a failure of the run."""
        headers = {
            "Content-Type": "application/json",
            "X-Key-Id": self.key_id,
            "X-Signature": sign(self.secret, body),
        }
        with self.client.post(
            path, data=body, headers=headers, name=name, catch_response=True
        ) as response:
            if response.status_code == 200:
                response.success()
                return 200, response.json()
            if response.status_code == 429:
                response.success()
                return 429, None
            response.failure(f"{response.status_code}: {response.text[:200]}")
            return response.status_code, None

    @task(10)
    def batch(self) -> None:
        env = self.environment
        size = _option(env, "lb_batch")
        redeliver = _option(env, "lb_redeliver")
        resent = STATE.some_acked(sum(random.random() < redeliver for _ in range(size)))
        players = _option(env, "lb_players")
        fresh = [STATE.new_event(players) for _ in range(size - len(resent))]
        batch = fresh + resent
        random.shuffle(batch)
        STATE.in_flight(batch)
        status, answer = self._post(
            "/v1/score-events:batch", encode({"events": batch}), "POST :batch"
        )
        if answer is None:
            if status == 429:
                for event in batch:
                    STATE.refused(event, "rate_limited")
            return  # otherwise the outcome is unknown: redelivered at the end
        again = {e["eventId"] for e in resent}
        for event, item in zip(batch, answer["results"], strict=True):
            if "error" in item:
                STATE.refused(event, item["error"])
                continue
            if event["eventId"] in again:
                STATE.stats["redeliveries"] += 1
                if item["status"] != "duplicate":
                    STATE.stats["redelivery not duplicate"] += 1
            STATE.acknowledge(event, item["status"])

    @task(1)
    def single_sent_twice(self) -> None:
        event = STATE.new_event(_option(self.environment, "lb_players"))
        body = encode(event)
        STATE.in_flight([event])
        for attempt in range(2):
            status, answer = self._post("/v1/score-events", body, "POST score-events")
            if answer is None:
                if status == 429:
                    STATE.refused(event, "rate_limited")
                return
            if attempt == 1:
                STATE.stats["redeliveries"] += 1
                if answer["status"] != "duplicate":
                    STATE.stats["redelivery not duplicate"] += 1
            STATE.acknowledge(event, answer["status"])


class Reader(FastHttpUser):  # type: ignore[misc]
    weight = 4
    wait_time = between(0.01, 0.05)

    def _get(self, path: str, name: str, **params: Any) -> None:
        query = f"{path}?{urlencode(params)}" if params else path
        with self.client.get(query, name=name, catch_response=True) as response:
            if response.status_code == 200:
                response.success()
            else:
                response.failure(f"{response.status_code}: {response.text[:200]}")

    @property
    def board(self) -> str:
        return str(_option(self.environment, "lb_board"))

    @task(5)
    def top(self) -> None:
        self._get(f"/v1/boards/{self.board}/top", "GET top", limit=100)

    @task(3)
    def rank(self) -> None:
        player = STATE.some_player()
        if player is not None:
            self._get(f"/v1/boards/{self.board}/players/{player}", "GET rank")

    @task(2)
    def nearby(self) -> None:
        player = STATE.some_player()
        if player is not None:
            self._get(
                f"/v1/boards/{self.board}/players/{player}/nearby",
                "GET nearby",
                radius=5,
            )


def check_exactly_once(environment: Any) -> list[str]:
    """Redeliver the unknown outcomes, then compare every player's live score with
    the sum of its acknowledged events; the mismatches (empty when all agree)."""
    key_id, _, secret = _option(environment, "lb_key").partition(":")
    board = _option(environment, "lb_board")
    host = environment.host
    problems: list[str] = []
    with LeaderboardClient(host, key_id, secret, max_attempts=8) as lb:
        pending = list(STATE.unknown.values())
        STATE.stats["unknown outcomes redelivered at the end"] = len(pending)
        if pending:
            items = lb.submit_batch(pending)
            for event, item in zip(pending, items, strict=True):
                if isinstance(item, EventResult):
                    STATE.acknowledge(event, item.status)
                else:
                    STATE.refused(event, f"{item.code} (at the end)")
        for player, total in sorted(STATE.expected.items()):
            try:
                score = lb.rank(board, player).score
            except NotFound:
                score = None
            if score != total:
                problems.append(f"{player}: expected {total}, served {score}")
    return problems


SUMMARY: list[str] = []


@events.quitting.add_listener
def _check(environment: Any, **_: Any) -> None:
    """Runs when the load has stopped, before Locust computes the exit code."""
    if environment.host is None:
        return
    started = time.monotonic()
    problems = check_exactly_once(environment)
    stats = STATE.stats
    lines = [
        "",
        "exactly-once check (every acknowledged event counts once)",
        f"  events sent (distinct eventIds): {len(STATE.points)}",
        f"  acknowledged (counted once):     {len(STATE.counted)}",
        f"  redeliveries sent:               {stats['redeliveries']}",
        f"  redeliveries not 'duplicate':    {stats['redelivery not duplicate']}",
        f"  players checked (live scores):   {len(STATE.expected)}",
        f"  mismatches:                      {len(problems)}",
    ]
    shown = {"redeliveries", "redelivery not duplicate"}
    lines += [
        f"  {name}: {count}"
        for name, count in sorted(stats.items())
        if name not in shown
    ]
    lines += [f"  MISMATCH {p}" for p in problems[:20]]
    lines.append(f"  check took {time.monotonic() - started:.1f} s")
    failed = bool(problems) or stats["redelivery not duplicate"] > 0
    lines.append("  RESULT: " + ("FAILED" if failed else "OK"))
    SUMMARY[:] = lines
    if failed:
        environment.process_exit_code = 1


@events.quit.add_listener
def _print_summary(**_: Any) -> None:
    """After Locust's own summary: the check's, the run's last lines."""
    print("\n".join(SUMMARY), flush=True)
