"""Speed layer -> land -> publish -> segment files, against real Redis and Delta."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, assume, example, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from conf.boards import board_rules, load_boards
from conf.settings import Settings
from jobs.land import bronze_path, load_bronze, run_land, transform_records
from jobs.publish import run_publish
from jobs.retention import (
    RETENTION_GRACE_SECONDS,
    apply_retention,
    protected_generations,
)
from jobs.segments import PublishAborted
from jobs.tables import GOLD_MANIFEST, GOLD_SNAPSHOTS, extract_published
from serving.segments import equi_depth_buckets
from speed.events import ScoreEventIn, normalize
from speed.partitions import Keys
from speed.store import SpeedLayer
from tests.conftest import OPEN_DAYS, OPEN_LATENESS, event
from tests.support.jobs import oracle_ranking, oracle_totals

pytestmark = pytest.mark.integration

# S3 ended long ago (every event for it is late-review); B5 is a best-of season.
BOARDS_YAML = """
regions: [eu, na]
seasons:
  - {id: S3, start: "2026-10-01T00:00:00Z", end: "2026-11-01T00:00:00Z",
     allowedLateness: "PT1H", aggregation: sum}
  - {id: S4, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN", aggregation: sum}
  - {id: B5, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN", aggregation: max}
""".replace("OPEN", OPEN_LATENESS)  # S4 and B5 stay open whatever the date


# Board options (issue 27) on top: A6 an asc best-of season (a race time), best-of
# daily boards, asc weekly boards, asc best-of all-time boards.
OPTIONS_YAML = (
    BOARDS_YAML
    + """  - {id: A6, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN", aggregation: best, order: asc}
windows:
  daily: {aggregation: max}
  weekly: {order: asc}
  alltime: {order: asc, aggregation: max}
""".replace("OPEN", OPEN_LATENESS)
)


def with_boards(
    settings: Settings, directory: Path, text: str = BOARDS_YAML
) -> Settings:
    path = directory / "boards.yaml"
    path.write_text(text)
    return settings.model_copy(update={"boards_file": path})


def read_arrow(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return ipc.open_file(source).read_all()


def read_generation(settings: Settings, generation: str) -> dict[str, Any]:
    directory = settings.segments_dir / generation
    manifest = json.loads((directory / "manifest.json").read_text())
    boards = {}
    for board, meta in manifest["boards"].items():
        data = read_arrow(directory / meta["file"])
        index = read_arrow(directory / meta["index"]).column("row").to_pylist()
        buckets = read_arrow(directory / meta["buckets"])
        players = data.column("player_id").to_pylist()
        scores = data.column("score").to_pylist()
        assert meta["population"] == len(players)
        assert [players[i] for i in index] == sorted(players, key=str.encode)
        assert sum(buckets.column("count").to_pylist()) == len(players)
        lowers = buckets.column("lower").to_pylist()
        assert lowers == sorted(set(lowers)) and lowers[0] == min(scores)
        ranked = []
        for i, (player, score) in enumerate(zip(players, scores, strict=True)):
            rank = 1 + sum(1 for s in scores if s > score)
            ranked.append((i + 1, rank, player, score))
        boards[board] = ranked
    return {"manifest": manifest, "boards": boards}


def log_records(client: redis.Redis, partitions: int) -> list[dict[str, Any]]:
    out = []
    for p in range(partitions):
        for _, fields in client.xrange(Keys(p).log):
            out.append(orjson.loads(fields[b"r"]))
    return out


def ingest(settings: Settings, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    boards = load_boards(settings.boards_file)

    async def go() -> list[Any]:
        client = aioredis.from_url(settings.redis_url)
        try:
            layer = SpeedLayer(
                client, boards, settings.partitions, settings.retention_seconds, None
            )
            now = datetime.now(UTC)
            normalized = [
                normalize(
                    ScoreEventIn.model_validate(e),
                    regions=boards.regions,
                    now=now,
                    max_future=timedelta(seconds=300),
                )
                for e in events
            ]
            return await layer.apply(normalized)
        finally:
            await client.aclose()

    outcomes = asyncio.run(go())
    return [o.body for o in outcomes if o.body is not None]


def test_api_to_segments(spark, settings, api, redis_client):
    for i, (player, points) in enumerate(
        [("P1", 920), ("P2", 900), ("P3", 900), ("P4", 880)]
    ):
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"E{i}",
                playerId=player,
                matchId=f"M{i}",
                result={"points": points},
            ),
        )
        assert reply.status_code == 200, reply.text
    # A downward correction of P1's match.
    reply = api.post(
        "/v1/score-events",
        event(
            eventId="E9",
            playerId="P1",
            matchId="M0",
            sourceRevision=2,
            result={"points": 870},
            kind="correction",
            reason="recount",
        ),
    )
    assert reply.json()["status"] == "accepted"
    generation = run_publish(settings, spark=spark, bucket_target=2)
    assert generation == "g1"
    got = read_generation(settings, generation)
    assert got["boards"]["season:S4:global"] == [
        (1, 1, "P2", 900),
        (2, 1, "P3", 900),
        (3, 3, "P4", 880),
        (4, 4, "P1", 870),
    ]
    manifest = got["manifest"]
    assert manifest["complete"] is True
    assert sum(manifest["boundary"].values()) == 5
    assert set(manifest["boundary"]) == {"0", "1", "2", "3"}
    meta = manifest["boards"]["season:S4:global"]
    assert meta["population"] == 4
    buckets = read_arrow(settings.segments_dir / "g1" / meta["buckets"])
    assert buckets.column("lower").to_pylist() == [870, 900]
    assert buckets.column("count").to_pylist() == [2, 2]
    # Each pair's version at the boundary (the correction made P1's second).
    rows = read_arrow(settings.segments_dir / "g1" / meta["file"])
    assert dict(
        zip(
            rows.column("player_id").to_pylist(),
            rows.column("version").to_pylist(),
            strict=True,
        )
    ) == {"P1": 2, "P2": 1, "P3": 1, "P4": 1}
    # Landed and trimmed.
    for p in range(settings.partitions):
        landed = int(redis_client.get(Keys(p).landed) or 0)
        assert landed == manifest["boundary"][str(p)]
        assert redis_client.xlen(Keys(p).log) == 0

    # Same bronze and boundary: byte-identical segment files in the next generation.
    assert run_publish(settings, spark=spark, bucket_target=2) == "g2"
    first = settings.segments_dir / "g1"
    second = settings.segments_dir / "g2"
    for path in first.glob("*.arrow"):
        assert (second / path.name).read_bytes() == path.read_bytes()
    assert (
        orjson.loads((second / "manifest.json").read_bytes())["boards"]
        == (manifest["boards"])
    )


def test_crash_before_manifest_leaves_no_visible_generation(spark, settings, api):
    api.post("/v1/score-events", event())
    with pytest.raises(PublishAborted):
        run_publish(settings, spark=spark, fail_before_manifest=True)
    assert not list(settings.segments_dir.glob("*/manifest.json"))
    api.post("/v1/score-events", event(eventId="E78", matchId="M92"))
    generation = run_publish(settings, spark=spark)
    assert generation == "g1"
    got = read_generation(settings, generation)
    assert got["boards"]["alltime:all:global"] == [(1, 1, "P2", 60)]
    assert sorted(p.name for p in settings.segments_dir.iterdir()) == ["g1"]


def test_crash_after_manifest_row_is_repaired_and_retention_keeps_newest(
    spark, settings, api
):
    """A crash between the manifest row and ``manifest.json`` is repaired by the
    next publish; then retention (newest two kept) removes the oldest generation
    once its grace period is over (one chain: two publishes fewer than a retention
    test of its own)."""
    settings = settings.model_copy(update={"retained_generations": 2})
    api.post("/v1/score-events", event())
    with pytest.raises(PublishAborted):
        run_publish(settings, spark=spark, fail_at="before_manifest_json")
    assert not (settings.segments_dir / "g1" / "manifest.json").exists()
    assert run_publish(settings, spark=spark) == "g2"
    assert (settings.segments_dir / "g1" / "manifest.json").exists()
    assert (
        read_generation(settings, "g1")["boards"]
        == (read_generation(settings, "g2")["boards"])
    )

    assert run_publish(settings, spark=spark) == "g3"
    # g1 left the newest two moments ago: it stays for the grace period, so reads an
    # API process pinned to it just before finish (jobs/retention.py).
    assert sorted(p.name for p in settings.segments_dir.iterdir()) == ["g1", "g2", "g3"]
    published = extract_published(spark, settings.delta_dir / GOLD_MANIFEST)
    later = time.time() + RETENTION_GRACE_SECONDS + 1
    protected = protected_generations(settings)
    assert protected == set()  # nothing rebased in this test
    assert apply_retention(settings, published, protected, now=later) == ["g1"]
    assert sorted(p.name for p in settings.segments_dir.iterdir()) == ["g2", "g3"]


def test_lander_crash_between_commit_and_trim(spark, settings, api, redis_client):
    for i in range(6):
        api.post("/v1/score-events", event(eventId=f"E{i}", playerId=f"P{i}"))

    def crash(partition: int) -> None:
        raise RuntimeError("killed after the Delta commit")

    with pytest.raises(RuntimeError):
        run_land(settings, spark, after_commit=crash)
    # Committed to Delta, but neither recorded in Redis nor trimmed.
    assert sum(redis_client.xlen(Keys(p).log) for p in range(4)) == 6
    landed = run_land(settings, spark)
    assert sum(landed.values()) == 6
    bronze = spark.read.format("delta").load(str(bronze_path(settings)))
    assert bronze.count() == 6
    assert bronze.select("partition", "position").distinct().count() == 6
    assert sum(redis_client.xlen(Keys(p).log) for p in range(4)) == 0
    # A blind retry of an already committed batch is dropped by Delta's txn check.
    partition = next(p for p, v in landed.items() if v > 0)
    raw = spark.createDataFrame(
        [
            (
                json.dumps(
                    {
                        "partition": partition,
                        "position": 1,
                        "receivedAtMs": 1,
                        "status": "accepted",
                        "event": {},
                    }
                ),
            )
        ],
        "value string",
    )
    load_bronze(transform_records(raw), bronze_path(settings), sum(landed.values()))
    assert spark.read.format("delta").load(str(bronze_path(settings))).count() == 6


def test_equi_depth_buckets():
    import numpy as np

    lowers, counts = equi_depth_buckets(np.array([5, 1, 1, 1, 2, 3, 3, 9]), 3)
    assert lowers.tolist() == [1, 2, 5] and counts.tolist() == [3, 3, 2]
    lowers, counts = equi_depth_buckets(np.array([7]), 100)
    assert lowers.tolist() == [7] and counts.tolist() == [1]


# ---------------------------------------------------------------- property test

PLAYERS = ["P1", "P2", "P3", "Zed", "é"]
MOMENTS = [
    "2026-10-15T10:00:00Z",  # S3 (closed: late)
    "2026-10-31T23:59:59.999Z",
    "2026-11-01T00:00:00Z",  # S4 + B5
    "2026-11-20T10:00:00Z",
    "2026-11-29T23:00:00Z",
]


@st.composite
def histories(draw: Any) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 25))
    events = []
    for i in range(n):
        if events and draw(st.integers(0, 5)) == 0:
            events.append(dict(draw(st.sampled_from(events))))  # redelivery
            continue
        player = draw(st.sampled_from(PLAYERS))
        events.append(
            event(
                eventId=f"E{i}",
                playerId=player,
                matchId=f"M{draw(st.integers(0, 3))}",
                sourceRevision=draw(st.integers(1, 4)),
                occurredAt=draw(st.sampled_from(MOMENTS)),
                region=draw(st.sampled_from(["eu", "na"])),
                result={"points": draw(st.sampled_from([0, 10, 20, 30]))},
            )
        )
    return events


def _pinned(
    i: int,
    player: str,
    match: int,
    revision: int,
    moment: int,
    region: str,
    points: int,
) -> dict[str, Any]:
    return event(
        eventId=f"E{i}",
        playerId=player,
        matchId=f"M{match}",
        sourceRevision=revision,
        occurredAt=MOMENTS[moment],
        region=region,
        result={"points": points},
    )


# Pinned: every kind of history the strategy draws, in one publish: a late event
# for the closed S3, both S3/S4 edges, a redelivery, a stale revision after a newer
# one, a correction down to zero, ties, a non-ASCII player, sum against best-of (B5).
PINNED_HISTORY = [
    _pinned(0, "P1", 0, 1, 0, "eu", 10),
    _pinned(1, "é", 1, 2, 2, "na", 30),
    _pinned(1, "é", 1, 2, 2, "na", 30),  # redelivery of E1
    _pinned(3, "é", 1, 1, 3, "na", 20),  # stale: revision 1 after 2
    _pinned(4, "Zed", 1, 1, 1, "eu", 20),  # S3's last millisecond
    _pinned(5, "P1", 2, 3, 4, "eu", 30),
    _pinned(6, "P1", 2, 4, 4, "eu", 0),  # corrected down to 0
    _pinned(7, "P2", 3, 1, 3, "na", 30),  # ties é
    _pinned(8, "P3", 0, 1, 2, "eu", 0),
    _pinned(9, "Zed", 0, 1, 3, "eu", 30),
    _pinned(10, "Zed", 3, 1, 4, "eu", 20),  # S4 sums 50, B5 keeps 30
]


def check_snapshot_equals_offline_sort(
    redis_server: Any, spark: Any, history: list[dict[str, Any]]
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    with tempfile.TemporaryDirectory() as tmp:
        base = Settings(
            redis_url=redis_server.url,
            data_dir=Path(tmp) / "lb",
            partitions=3,
            rate_limit="off",
            dedupe_window=timedelta(days=OPEN_DAYS),
        )
        settings = with_boards(base, Path(tmp), OPTIONS_YAML)
        ingest(settings, history)
        records = log_records(client, settings.partitions)
        config = load_boards(settings.boards_file)
        expected = oracle_totals(config, records)
        # The speed layer's own totals are the ground truth of the same events
        # (Redis and the segments hold oriented scores: -score on asc boards).
        sign = {b: board_rules(config, b).sign for b in expected}
        for board, players in expected.items():
            live = {}
            for p in range(settings.partitions):
                for player, value in client.hgetall(Keys(p).totals(board)).items():
                    live[player.decode()] = sign[board] * int(value.split(b"|")[0])
            assert live == players, board
        generation = run_publish(settings, spark=spark)
        got = read_generation(settings, generation)["boards"]
        assert got == {
            b: oracle_ranking({p: sign[b] * s for p, s in t.items()})
            for b, t in expected.items()
        }
        # Gold rows: real scores, ranked lower first on asc boards.
        gold = (
            spark.read.format("delta")
            .load(str(settings.delta_dir / GOLD_SNAPSHOTS))
            .where(F.col("generation") == generation)
            .collect()
        )
        assert {
            b: sorted(
                (r["position"], r["rank"], r["player_id"], r["score"])
                for r in gold
                if r["board"] == b
            )
            for b in expected
        } == {b: oracle_ranking(t, sign[b] == -1) for b, t in expected.items()}
        assert any(s == -1 for s in sign.values())
    client.close()


# In `make test`: the pinned history and one random one (a publish each; it was
# five random ones). Hypothesis draws its simplest history first (one event); the
# assume() rejects it before any publish. The slow test below draws 25 histories,
# the simplest too.
@hyp_settings(
    max_examples=1,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
@given(history=histories())
@example(history=PINNED_HISTORY)
def test_published_snapshot_equals_offline_sort(spark, redis_server, history):
    assume(len(history) >= 4)
    check_snapshot_equals_offline_sort(redis_server, spark, history)


@pytest.mark.slow
@hyp_settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories())
def test_published_snapshot_equals_offline_sort_many(spark, redis_server, history):
    check_snapshot_equals_offline_sort(redis_server, spark, history)
