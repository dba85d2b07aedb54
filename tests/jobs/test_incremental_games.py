"""Incremental publish with a boards file that lists games (issue 26): two games
with the same player, match and event ids, corrections, duplicates, held and
released records and a first_achieved season in both; the incremental generation
equals a full recompute of the same boundary, file for file."""

from __future__ import annotations

import copy
import random
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from jobs.build import check_generation
from jobs.publish import run_publish
from speed.server import RedisServer
from tests.support.generations import assert_same_generation
from tests.support.incremental import (
    BOARDS_YAML,
    OCCURRED,
    PLAYERS,
    append_bronze,
    log_lines,
    make_settings,
    manifest,
)

# Slow (two publishes and a full rebuild of two games): a release check. make test
# keeps games in the batch layer (tests/jobs/test_games_publish.py) and the
# incremental recompute of one game (tests/jobs/test_incremental.py).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

GAMES = ("default", "arena")


def games_yaml() -> str:
    """BOARDS_YAML's boards for each of GAMES."""
    body = "".join(f"    {line}\n" for line in BOARDS_YAML.strip().splitlines())
    return "games:\n" + "".join(f"  - id: {g}\n{body}" for g in GAMES)


def history(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "player": rng.choice(sorted(PLAYERS)),
            "match": rng.randint(0, 2),
            "revision": rng.randint(0, 3),
            "points": rng.randint(0, 5),
            "occurred": rng.choice(OCCURRED[1:4]),
            "region": rng.choice(["eu", "na"]),
            "late": False,
            "kind": rng.choice([0, 0, 0, 1, 2, 3]),
        }
        for _ in range(count)
    ]


def in_game(lines: list[dict[str, Any]], game: str) -> list[dict[str, Any]]:
    """The log records as another game's: the event names its game and the
    result its internal board ids."""
    if game == "default":
        return lines
    out = copy.deepcopy(lines)
    for line in out:
        line["event"]["game"] = game
        for item in line["result"]["boards"]:
            item["board"] = f"{game}~{item['board']}"
    return out


def renumber(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gap-free positions per partition, in list order."""
    positions: dict[int, int] = defaultdict(int)
    for line in lines:
        positions[line["partition"]] += 1
        line["position"] = positions[line["partition"]]
    return lines


def test_incremental_publish_with_games_equals_full(
    spark: SparkSession, redis_server: RedisServer
) -> None:
    # The same ids in both games, different points in the arena.
    plays = history(7, 24)
    arena = [{**h, "points": (h["points"] * 3 + 1) % 7} for h in plays]
    split = 14
    per_game = {
        "default": log_lines(plays),
        "arena": in_game(log_lines(arena), "arena"),
    }
    lines = renumber(
        [
            *per_game["default"][:split],
            *per_game["arena"][:split],
            *per_game["default"][split:],
            *per_game["arena"][split:],
        ]
    )
    first = 2 * split
    with tempfile.TemporaryDirectory(prefix="incremental-games-") as tmp:
        # Layering off (on by default): compared with the full build byte for
        # byte, as check_history (tests/jobs/test_incremental.py) does.
        settings = make_settings(Path(tmp), redis_server).model_copy(
            update={"layers_max_chain": 0}
        )
        assert settings.boards_file is not None
        settings.boards_file.write_text(games_yaml())
        append_bronze(spark, settings, lines[:first])
        assert run_publish(settings, spark=spark, land=False, bucket_target=2) == "g1"
        assert manifest(settings, "g1")["build"]["mode"] == "full"
        boards = set(manifest(settings, "g1")["boards"])
        assert any(b.startswith("arena~season:S4:") for b in boards), boards
        assert any(b.startswith("season:S4:") for b in boards), boards
        append_bronze(spark, settings, lines[first:])
        assert run_publish(settings, spark=spark, land=False, bucket_target=2) == "g2"
        build = manifest(settings, "g2")["build"]
        assert build["mode"] == "incremental" and build["from"] == "g1", build
        g3 = run_publish(settings, spark=spark, land=False, bucket_target=2, full=True)
        assert g3 == "g3" and manifest(settings, "g3")["build"]["mode"] == "full"
        assert_same_generation(settings, "g2", "g3", spark)
        check = check_generation(settings, spark, "g2")
        assert check.ok and check.rows > 0, check
