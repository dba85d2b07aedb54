"""`lb demo`: the main job on embedded defaults.

Starts the local stack, plays a synthetic season through the real signed ingest API
(redeliveries, corrections up and down, many ties), publishes a generation with Spark,
then reads the top 10 and one player's rank with their labels, timing every step, and
stops what it started.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson

from api.security import sign
from conf.settings import Settings

SEASON_START = datetime(2026, 11, 1, tzinfo=UTC)
BATCH = 1000
CONNECTIONS = 4


def synthetic_events(
    players: int, events: int, seed: int = 4
) -> Iterator[dict[str, Any]]:
    """A reproducible season: ~3% redeliveries, ~2% corrections (half of them
    downward), points on a coarse scale so that many players tie."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    span = max(60.0, min((now - SEASON_START).total_seconds(), 29 * 86400.0) - 600)
    recent: list[dict[str, Any]] = []
    sent = 0
    match = 0
    while sent < events:
        roll = rng.random()
        if recent and roll < 0.03:
            yield rng.choice(recent)  # the same event again: a redelivery
        elif recent and roll < 0.05:
            slot = rng.randrange(len(recent))
            original = recent[slot]
            points = max(
                0, original["result"]["points"] + rng.choice((-20, -10, 10, 20))
            )
            revision = original["sourceRevision"] + 1
            correction = {
                **original,
                "eventId": f"{original['matchId']}-r{revision}",
                "sourceRevision": revision,
                "result": {"points": points},
                "kind": "correction",
                "reason": "score review",
            }
            # The correction replaces the match's latest event, so the next one for
            # this match builds on it (and never reuses an eventId).
            recent[slot] = correction
            yield correction
        else:
            match += 1
            player = rng.randrange(players)
            occurred = SEASON_START + timedelta(seconds=rng.uniform(0, span))
            event = {
                "eventId": f"E{match}",
                "playerId": f"P{player:06d}",
                "matchId": f"M{match}",
                "sourceRevision": 1,
                "occurredAt": occurred.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "region": "eu" if player % 2 == 0 else "na",
                "result": {"points": rng.randrange(0, 100, 10)},
                "kind": "result",
                "reason": None,
            }
            recent.append(event)
            if len(recent) > 5000:
                recent.pop(rng.randrange(len(recent)))
            yield event
        sent += 1


async def _ingest(
    url: str, secret: bytes, key_id: str, events: Iterator[dict[str, Any]]
) -> dict[str, int]:
    statuses: dict[str, int] = {}
    lock = asyncio.Lock()

    async def worker(client: httpx.AsyncClient) -> None:
        while True:
            async with lock:
                batch = [e for _, e in zip(range(BATCH), events, strict=False)]
            if not batch:
                return
            body = orjson.dumps({"events": batch})
            reply = await client.post(
                f"{url}/v1/score-events:batch",
                content=body,
                headers={
                    "X-Key-Id": key_id,
                    "X-Signature": sign(secret, body),
                    "Content-Type": "application/json",
                },
            )
            reply.raise_for_status()
            for result in reply.json()["results"]:
                key = result.get("status") or result.get("error") or "?"
                statuses[key] = statuses.get(key, 0) + 1

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(worker(client) for _ in range(CONNECTIONS)))
    return statuses


def _labels(body: dict[str, Any]) -> str:
    generation = (body.get("generation") or {}).get("id")
    return (
        f"exactness={body['exactness']} basis={body['basis']} "
        f"errorBound={body['errorBound']} generation={generation} "
        f"asOf={body['asOf']} population={body['population']}"
    )


def run_demo(
    settings: Settings,
    players: int = 100_000,
    events: int = 1_000_000,
    port: int | None = None,
    keep_running: bool = False,
) -> int:
    from cli.stack import down, up
    from jobs.publish import run_publish
    from speed.rebase import rebase_published
    from speed.server import free_port

    # The demo plays in its own data dir, fresh each run so that it is reproducible,
    # and its players submit many matches each: the per-player limit is off.
    data_dir = settings.data_dir / "demo"
    shutil.rmtree(data_dir, ignore_errors=True)
    settings = settings.model_copy(update={"rate_limit": "off", "data_dir": data_dir})
    os.environ["LB_RATE_LIMIT"] = "off"  # inherited by the API process
    os.environ["LB_DEMO"] = "true"  # the dev key is expected here: no warning
    os.environ["LB_DATA_DIR"] = str(data_dir.resolve())
    print(f"demo data in {data_dir}")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    url = up(settings, port or free_port())
    timings["start stack"] = time.perf_counter() - started
    try:
        key_id, secret = next(iter(settings.signing_keys.items()))
        print(f"stack up at {url}; ingesting {events:,} events for {players:,} players")
        t = time.perf_counter()
        statuses = asyncio.run(
            _ingest(url, secret, key_id, synthetic_events(players, events))
        )
        timings["ingest"] = time.perf_counter() - t
        print(
            f"ingest: {statuses} in {timings['ingest']:.1f} s "
            f"({events / timings['ingest']:,.0f} events/s)"
        )

        t = time.perf_counter()
        generation = run_publish(settings)
        timings["publish"] = time.perf_counter() - t
        t = time.perf_counter()
        rebase_published(settings, generation)
        timings["rebase"] = time.perf_counter() - t
        print(
            f"published {generation} in {timings['publish']:.1f} s "
            f"(rebase {timings['rebase']:.1f} s)"
        )

        board = "season:S4:global"
        t = time.perf_counter()
        top = httpx.get(f"{url}/v1/boards/{board}/top", params={"limit": 10}).json()
        timings["read top 10"] = time.perf_counter() - t
        print(f"\ntop 10 of {board}  [{_labels(top)}]")
        for entry in top["entries"]:
            print(
                f"  {entry['position']:>3}  rank {entry['rank']:>3}  "
                f"{entry['playerId']}  {entry['score']}"
            )
        player = (
            top["entries"][len(top["entries"]) // 2]["playerId"]
            if top["entries"]
            else "P000001"
        )
        for mode in ("live", "snapshot", "approx"):
            t = time.perf_counter()
            reply = httpx.get(
                f"{url}/v1/boards/{board}/players/{player}", params={"mode": mode}
            )
            timings[f"read rank ({mode})"] = time.perf_counter() - t
            body = reply.json()
            if reply.status_code != 200:
                print(f"\n{player} ({mode}): {reply.status_code} {body}")
                continue
            print(
                f"\n{player} ({mode}): score {body['score']} rank {body['rank']} "
                f"topPercent {body['topPercent']}  [{_labels(body)}]"
            )
    finally:
        t = time.perf_counter()
        down(settings)
        timings["stop stack"] = time.perf_counter() - t
    print("\ntimings:")
    for step, seconds in timings.items():
        print(f"  {step:<22} {seconds * 1000:>10.1f} ms")
    return 0
