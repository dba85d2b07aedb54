"""Random histories as log records and bronze, the boards they feed, the settings
of an incremental publish and the publish as Airflow runs it (incremental,
layered and cluster publish tests)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from conf.boards import BoardsConfig, boards_for_event, load_boards, to_ms
from conf.settings import Settings
from jobs.build import recompute_generation
from jobs.land import bronze_path, transform_records
from jobs.publish import land_inputs
from jobs.repair import next_generation
from jobs.segments import publish_segments
from speed.server import RedisServer
from tests.support.jobs import NOW_MS, ts

BOARDS_YAML = """
regions: [eu, na]
seasons:
  - {id: S3, start: "2026-10-01T00:00:00Z", end: "2026-11-01T00:00:00Z",
     allowedLateness: "PT1H", aggregation: sum}
  - {id: S4, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "PT1H", aggregation: sum, tieBreak: first_achieved}
  - {id: B5, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     aggregation: max, rank: unique}
"""


PLAYERS = {"a": 0, "b": 1, "c": 0, "Zed": 1}  # player -> partition


OCCURRED = [
    "2026-10-31T23:59:59Z",  # last second of S3
    "2026-11-01T00:00:00Z",  # first second of S4 / B5
    "2026-11-16T12:00:00Z",
    "2026-11-30T23:59:59Z",
    "2026-12-01T00:00:00Z",  # after S4
]


# After every November board's cutoff (S4 ends 2026-12-01 + 1 h lateness, the
# November windows' lateness defaults to less than a week).
LATE_MS = to_ms(ts("2026-12-09T00:00:00Z"))


def log_lines(
    history: list[dict[str, Any]], boards_yaml: str = BOARDS_YAML
) -> list[dict[str, Any]]:
    """Log records (the speed layer's JSON) for a generated history.

    Every record's result names the boards of its event with the pair's next
    version (what the segments' ``version`` column is derived from), held and
    released records too: a pair can then be named by the log without a total on
    that board (a correction that moved the match, a held record), which the
    incremental build must carry over like the full derivation does."""
    config = BoardsConfig.model_validate(yaml.safe_load(boards_yaml))
    versions: dict[tuple[str, str], int] = defaultdict(int)
    positions: dict[int, int] = defaultdict(int)
    ids: dict[str, list[str]] = defaultdict(list)
    held: dict[str, list[str]] = defaultdict(list)
    out = []
    for i, h in enumerate(history):
        player, partition = h["player"], PLAYERS[h["player"]]
        event_id, status = f"E{i}", None
        if h["kind"] == 1 and ids[player]:
            event_id = ids[player][i % len(ids[player])]
        elif h["kind"] == 2:
            status = "quarantined"
            held[player].append(event_id)
        elif h["kind"] == 3 and held[player]:
            event_id, status = held[player][i % len(held[player])], "released"
        ids[player].append(event_id)
        positions[partition] += 1
        named = []
        for spec in boards_for_event(config, ts(h["occurred"]), h["region"]):
            versions[(spec.board, player)] += 1
            named.append(
                {"board": spec.board, "version": versions[(spec.board, player)]}
            )
        out.append(
            {
                "partition": partition,
                "position": positions[partition],
                "receivedAtMs": h.get("received", LATE_MS if h["late"] else NOW_MS),
                "status": status,
                "event": {
                    "eventId": event_id,
                    "playerId": player,
                    "matchId": f"M{h['match']}",
                    "sourceRevision": h["revision"],
                    "occurredAt": h["occurred"],
                    "region": h["region"],
                    "points": h["points"],
                },
                "result": {"boards": named},
            }
        )
    return out


def append_bronze(spark: SparkSession, settings: Settings, lines: list[dict]) -> None:
    if not lines:
        return
    raw = spark.createDataFrame([(json.dumps(r),) for r in lines], "value string")
    (
        transform_records(raw)
        .write.format("delta")
        .mode("append")
        .partitionBy("partition")
        .option("mergeSchema", "true")
        .save(str(bronze_path(settings)))
    )


def manifest(settings: Settings, generation: str) -> dict[str, Any]:
    path = settings.segments_dir / generation / "manifest.json"
    return json.loads(path.read_text())


def make_settings(
    root: Path, redis_server: RedisServer, boards_yaml: str = BOARDS_YAML
) -> Settings:
    root.mkdir(parents=True, exist_ok=True)
    boards = root / "boards.yaml"
    boards.write_text(boards_yaml)
    return Settings(
        redis_url=redis_server.url,
        data_dir=root / "lb",
        partitions=2,
        boards_file=boards,
        rate_limit="off",
        # Thresholds on every board with a contribution, so the equality covers
        # the untouched boards' thresholds an incremental manifest keeps.
        quarantine_min_samples=1,
    )


record = st.fixed_dictionaries(
    {
        "player": st.sampled_from(sorted(PLAYERS)),
        "match": st.integers(0, 2),
        "revision": st.integers(0, 3),
        "points": st.integers(0, 5),
        "occurred": st.sampled_from(OCCURRED),
        "region": st.sampled_from(["eu", "na"]),
        "late": st.booleans(),
        # 0 new id; 1 reuse an earlier id of the player (duplicate); 2 quarantined;
        # 3 release an earlier quarantined record of the player.
        "kind": st.sampled_from([0, 0, 0, 0, 1, 2, 3]),
    }
)


def publish_with_flags(
    settings: Settings, spark: SparkSession, *, full: bool = False
) -> str:
    """The publish phases as Airflow runs them, reading the shadow flags from
    Redis without landing (run_publish reads flags only when it lands)."""
    generation, number = next_generation(settings, spark)
    landed = land_inputs(settings, spark, land=False)
    build = recompute_generation(
        settings,
        spark,
        load_boards(settings.boards_file),
        generation,
        landed.boundary,
        full=full,
        bucket_target=2,
    )
    return publish_segments(
        settings,
        spark,
        load_boards(settings.boards_file),
        generation,
        number,
        landed,
        bucket_target=2,
        build=build,
    )
