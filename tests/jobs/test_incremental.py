"""An incremental generation equals a full recompute of the same boundary (real
Spark and Delta): gold rows, manifest board entries and segment bytes.

Random histories: corrections up and down, stale revisions, duplicate event ids,
quarantined records and their releases, events late for seasons and windows,
occurredAt on season edges, a best-of season ranked ``unique`` and a
``first_achieved`` season, every board an event can feed. Bronze is appended in
two batches; the first publish is full, the second incremental, the third full with
the same boundary (``full=True``); the second and third must match.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import redis
import yaml
from delta.tables import DeltaTable
from hypothesis import HealthCheck, Phase, assume, example, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from conf.boards import BoardsConfig, boards_for_event
from conf.settings import Settings
from jobs import incremental
from jobs.build import check_generation
from jobs.publish import run_publish
from jobs.tables import (
    DELETION_VECTORS,
    GOLD_CHANGES,
    GOLD_MANIFEST,
    SILVER_STATS_COLUMNS,
    STATS_COLUMNS,
    load_gold_changes,
)
from serving.files import read_arrow
from serving.segments import write_board_segment
from speed.partitions import Keys
from speed.server import RedisServer
from tests.support.generations import assert_same_generation, gold_rows, segment_files
from tests.support.incremental import (
    BOARDS_YAML,
    OCCURRED,
    PLAYERS,
    append_bronze,
    log_lines,
    make_settings,
    manifest,
    publish_with_flags,
    record,
)
from tests.support.jobs import ts

# Several publishes per test: minutes each on a loaded 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def side_versions(settings: Settings, generation: str) -> dict[tuple[str, str], int]:
    """(board, player) -> version of a generation's versions side files."""
    out = {}
    for board, name in manifest(settings, generation)["versions"].items():
        table = read_arrow(settings.segments_dir / generation / name).to_pydict()
        for player, version in zip(table["player_id"], table["version"], strict=True):
            out[(board, player)] = version
    return out


def segment_version(
    settings: Settings, generation: str, board: str, player: str
) -> int | None:
    """The version a generation's segment gives a player on a board (None: the
    player is not on it)."""
    meta = manifest(settings, generation)["boards"].get(board)
    if meta is None:
        return None
    table = read_arrow(settings.segments_dir / generation / meta["file"]).to_pydict()
    if player not in table["player_id"]:
        return None
    return int(table["version"][table["player_id"].index(player)])


def check_history(
    spark: SparkSession,
    redis_server: RedisServer,
    history: list[dict[str, Any]],
    split: int,
) -> dict[str, Any]:
    lines = log_lines(history)
    cut = min(split, len(lines))
    with tempfile.TemporaryDirectory(prefix="incremental-") as tmp:
        # Layering off (on by default): the incremental recompute against a full
        # one, byte for byte; a layered board's manifest entry names its chain,
        # so layered generations are compared by their reads
        # (tests/jobs/test_layered_equality.py).
        settings = make_settings(Path(tmp), redis_server).model_copy(
            update={"layers_max_chain": 0}
        )
        append_bronze(spark, settings, lines[:cut])
        assert run_publish(settings, spark=spark, land=False, bucket_target=2) == "g1"
        assert manifest(settings, "g1")["build"]["mode"] == "full"
        append_bronze(spark, settings, lines[cut:])
        assert run_publish(settings, spark=spark, land=False, bucket_target=2) == "g2"
        build = manifest(settings, "g2")["build"]
        assert build["mode"] == "incremental" and build["from"] == "g1"
        touched = {r["event"]["playerId"] for r in lines[cut:]}
        assert build["touchedPlayers"] == len(touched)
        g3 = run_publish(settings, spark=spark, land=False, bucket_target=2, full=True)
        assert g3 == "g3" and manifest(settings, "g3")["build"]["mode"] == "full"
        assert_same_generation(settings, "g2", "g3", spark)
        return build


def _added_files(path: Path) -> list[dict[str, Any]]:
    """The add actions of the Delta table's JSON commits: every file written since
    its creation (a test's table has no checkpoint before them)."""
    return [
        action["add"]
        for commit in sorted((path / "_delta_log").glob("*.json"))
        for line in commit.read_text().splitlines()
        if "add" in (action := json.loads(line))
    ]


def test_incremental_chain_links_untouched_boards(
    spark: SparkSession, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The MERGE of a large delta's replaced rows, here for one: the other tests
    # take the DELETE of a few (SMALL_REPLACE), equal to it by the same checks.
    monkeypatch.setattr(incremental, "SMALL_REPLACE", 0)
    history = [
        {
            "player": "a",
            "match": 0,
            "revision": 1,
            "points": 5,
            "occurred": OCCURRED[0],
            "region": "eu",
            "late": False,
            "kind": 0,
        },
        {
            "player": "b",
            "match": 0,
            "revision": 1,
            "points": 3,
            "occurred": OCCURRED[2],
            "region": "na",
            "late": False,
            "kind": 0,
        },
        # b's second match, on other daily and weekly boards: untouched later.
        {
            "player": "b",
            "match": 1,
            "revision": 1,
            "points": 2,
            "occurred": OCCURRED[3],
            "region": "na",
            "late": False,
            "kind": 0,
        },
        # Later: b corrects its first match downwards; a is untouched.
        {
            "player": "b",
            "match": 0,
            "revision": 2,
            "points": 1,
            "occurred": OCCURRED[2],
            "region": "na",
            "late": False,
            "kind": 0,
        },
    ]
    lines = log_lines(history)
    with tempfile.TemporaryDirectory(prefix="incremental-") as tmp:
        settings = make_settings(Path(tmp), redis_server)
        append_bronze(spark, settings, lines[:3])
        assert run_publish(settings, spark=spark, land=False) == "g1"
        append_bronze(spark, settings, lines[3:])
        assert run_publish(settings, spark=spark, land=False) == "g2"
        build = manifest(settings, "g2")["build"]
        # Layered gold (the default): g2's gold is the 12 changed (board, b) rows
        # over g1's full ranking (jobs/incremental.py next_gold_chain).
        assert build.pop("gold") == {
            "base": "g1",
            "layers": ["g2"],
            "rows": 12,
            "baseRows": sum(
                meta["population"]
                for meta in manifest(settings, "g1")["boards"].values()
            ),
        }
        assert build == {
            "mode": "incremental",
            "fingerprint": build["fingerprint"],
            "from": "g1",
            # The corrected match's boards: daily, weekly, monthly, all-time x
            # (global, na), S4 and B5 x (global, na); not the daily and weekly
            # boards only b's untouched match is on.
            "touchedBoards": 12,
            "touchedPlayers": 1,
            # b's corrected match's two records, not its untouched match's.
            "rederivedRecords": 2,
        }
        # The merges marked the old rows in deletion vectors instead of copying
        # the rest of each file they were in, then an append wrote the new rows.
        # silver_contributions: only the corrected match's rows (not b's other
        # match), by a delete-only MERGE with the one pair as its source
        # (jobs/incremental.py load_replace; a MERGE with an insert clause
        # shuffled the whole target). silver_totals: every row of b, by a DELETE
        # listing its id (players_condition), then its
        # 12 re-derived totals and its rows on the boards only its untouched
        # match is on, appended again as they were (replace_where).
        for table in ("silver_contributions", "silver_totals"):
            path = settings.delta_dir / table
            detail = DeltaTable.forPath(spark, str(path)).detail().first()
            assert detail is not None
            assert detail["properties"].get(DELETION_VECTORS) == "true"
            # Statistics on the keys only (jobs/tables.py SILVER_STATS_COLUMNS).
            keys = SILVER_STATS_COLUMNS[table]
            assert detail["properties"].get(STATS_COLUMNS) == keys
            stats = [json.loads(f["stats"]) for f in _added_files(path)]
            assert stats and all(
                set(s["minValues"]) == set(keys.split(","))
                for s in stats
                if s["numRecords"]
            ), stats
            merge, append = (
                spark.sql(f"DESCRIBE HISTORY delta.`{path}`")
                .orderBy(F.col("version").desc())
                .limit(2)
                .collect()[::-1]
            )
            assert append["operation"] == "WRITE", (table, append["operation"])
            assert append["operationParameters"]["mode"] == "Append", table
            if table == "silver_totals":
                assert merge["operation"] == "DELETE", merge["operation"]
                metrics = merge["operationMetrics"]
                earlier = (
                    spark.read.format("delta")
                    .option("versionAsOf", merge["version"] - 1)
                    .load(str(path))
                )
                b_rows = earlier.where(F.col("player_id") == "b").count()
                assert b_rows > 12, b_rows  # b's untouched match's boards too
                assert metrics["numDeletedRows"] == str(b_rows), metrics
                assert metrics["numCopiedRows"] == "0", metrics
                assert metrics["numDeletionVectorsAdded"] != "0", metrics
                assert append["operationMetrics"]["numOutputRows"] == str(b_rows)
                # b's rows on the untouched boards are appended as they were.
                now = spark.read.format("delta").load(str(path))
                kept = earlier.where(F.col("player_id") == "b").exceptAll(
                    now.where(F.col("player_id") == "b")
                )
                assert kept.count() == 12, kept.collect()  # the re-derived keys
                continue
            assert merge["operation"] == "MERGE", (table, merge["operation"])
            metrics = merge["operationMetrics"]
            assert metrics["numSourceRows"] == "1", (table, metrics)
            assert metrics["numTargetRowsDeleted"] == "12", (table, metrics)
            assert metrics["numTargetRowsUpdated"] == "0", (table, metrics)
            assert metrics["numTargetRowsInserted"] == "0", (table, metrics)
            assert metrics["numTargetRowsCopied"] == "0", (table, metrics)
            assert metrics["numTargetDeletionVectorsAdded"] != "0", (table, metrics)
            assert append["operationMetrics"]["numOutputRows"] == "12", table
        g1, g2 = settings.segments_dir / "g1", settings.segments_dir / "g2"
        s3 = manifest(settings, "g1")["boards"]["season:S3:eu"]["file"]
        assert (g1 / s3).stat().st_ino == (g2 / s3).stat().st_ino  # hard link
        s4 = manifest(settings, "g2")["boards"]["season:S4:na"]["file"]
        assert (g1 / s4).stat().st_ino != (g2 / s4).stat().st_ino
        # b's version on the rewritten board: 2 at g1's boundary, 3 after the
        # delta's record (from g1's segment and the delta, not the whole log).
        # season:S3:eu (a's 5 points, untouched) keeps g1's threshold; S4:na's is
        # taken again over its rows (b's corrected match: 1 and 2 points).
        quarantine = manifest(settings, "g2")["quarantine"]
        assert quarantine["season:S3:eu"] == {"eu": 5}
        assert quarantine["season:S4:na"] == {"na": 2}
        for directory, version in ((g1, 2), (g2, 3)):
            table = read_arrow(directory / s4).to_pydict()
            row = table["player_id"].index("b")
            assert table["version"][row] == version, directory
        # Nothing new: every board is linked, and gold is g2's chain as it is (no
        # layer of no rows: idle publishes would fill the chain and compact). A
        # crashed attempt's layer of g3 (one row naming a score nobody has) is
        # dropped, not left for the segments phase to read.
        load_gold_changes(
            spark.createDataFrame(
                [("season:S4:na", "b", 999, None, False)],
                "board string, player_id string, score long, achieved_ms long, "
                "removed boolean",
            ),
            settings.delta_dir / GOLD_CHANGES,
            "g3",
            3,
            "g1",
        )
        assert run_publish(settings, spark=spark, land=False) == "g3"
        assert manifest(settings, "g3")["build"]["touchedBoards"] == 0
        assert (
            manifest(settings, "g3")["build"]["gold"]
            == manifest(settings, "g2")["build"]["gold"]
        )
        left = spark.read.format("delta").load(str(settings.delta_dir / GOLD_CHANGES))
        assert left.where(F.col("generation") == "g3").count() == 0
        # g3 serves g2's files as they are (hard links), so the check of g2
        # against a full recompute below holds for g3 too (a full publish g4
        # compared with both, byte for byte, cost a publish and said no more).
        g3 = settings.segments_dir / "g3"
        m2, m3 = manifest(settings, "g2"), manifest(settings, "g3")
        assert m3["boards"] == m2["boards"] and m3["boundary"] == m2["boundary"]
        for meta in m2["boards"].values():
            for name in segment_files(meta):
                assert (g2 / name).stat().st_ino == (g3 / name).stat().st_ino, name

        # `lb verify --check-incremental`: g2 equals a full recompute; a gold row
        # lost afterwards is found.
        check = check_generation(settings, spark, "g2")
        assert check.ok and check.rows > 0 and check.build["mode"] == "incremental"
        assert check.served_differences == ()
        # g2's gold is a layer: b's changed row is in gold_changes, and without it
        # the chain answers g1's row for b (one row differs on each side).
        gold = DeltaTable.forPath(spark, str(settings.delta_dir / GOLD_CHANGES))
        gold.delete("generation = 'g2' AND board = 'season:S4:na' AND player_id = 'b'")
        # A served segment that answers otherwise (b's score changed in g2's file
        # of season:S4:na) is named too, though gold is what it was.
        s4_meta = manifest(settings, "g2")["boards"]["season:S4:na"]
        table = read_arrow(g2 / s4_meta["file"])
        scores = [
            s + 10 if p == "b" else s
            for p, s in zip(
                table.column("player_id").to_pylist(),
                table.column("score").to_pylist(),
                strict=True,
            )
        ]
        (g2 / s4_meta["file"]).unlink()  # g3 links it: a new file, not g3's
        write_board_segment(
            g2,
            "season:S4:na",
            table.column("player_id").combine_chunks(),
            pa.array(scores, pa.int64()),
            2,
            versions=table.column("version").combine_chunks(),
        )
        check = check_generation(settings, spark, "g2")
        assert (check.only_in_gold, check.only_in_recompute) == (1, 1)
        assert not check.ok
        assert check.served_differences, check
        assert {d.split(": ")[0] for d in check.served_differences} == {
            "season:S4:na"
        }, check.served_differences


def _record(match: int, revision: int, points: int, kind: int = 0) -> dict[str, Any]:
    return {
        "player": "a",
        "match": match,
        "revision": revision,
        "points": points,
        "occurred": OCCURRED[2],
        "region": "eu",
        "late": False,
        "kind": kind,
    }


# In `make test`: the explicit example below (three publishes). The random
# history `make test` draws is tests/jobs/test_layered_equality.py's: the same
# incremental build with layering on, over three batches. The slow test below
# draws 25 histories with layering off, empty batches too.
@hyp_settings(
    max_examples=1,
    phases=[Phase.explicit],
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
@given(history=st.lists(record, min_size=2, max_size=14), split=st.integers(0, 13))
@example(
    history=[
        {
            "player": "a",
            "match": 0,
            "revision": 2,
            "points": 5,
            "occurred": OCCURRED[1],
            "region": "eu",
            "late": False,
            "kind": 2,
        },
        {
            "player": "a",
            "match": 0,
            "revision": 1,
            "points": 4,
            "occurred": OCCURRED[3],
            "region": "na",
            "late": True,
            "kind": 0,
        },
        {
            "player": "a",
            "match": 0,
            "revision": 2,
            "points": 5,
            "occurred": OCCURRED[1],
            "region": "eu",
            "late": False,
            "kind": 3,
        },
        {
            "player": "Zed",
            "match": 1,
            "revision": 0,
            "points": 3,
            "occurred": OCCURRED[4],
            "region": "na",
            "late": False,
            "kind": 1,
        },
    ],
    split=1,
)
def test_incremental_equals_full(
    spark: SparkSession,
    redis_server: RedisServer,
    history: list[dict[str, Any]],
    split: int,
) -> None:
    assume(0 < split < len(history))
    check_history(spark, redis_server, history, split)


@pytest.mark.slow
@hyp_settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=st.lists(record, min_size=1, max_size=30), split=st.integers(0, 30))
def test_incremental_equals_full_many(
    spark: SparkSession,
    redis_server: RedisServer,
    history: list[dict[str, Any]],
    split: int,
) -> None:
    check_history(spark, redis_server, history, split)


# One history for two checks (the re-derived records, a shadowed player across an
# incremental build): one publish chain instead of two, each test's assertions as
# they were. a's records come first so that its duplicate (kind 1, E3) still
# reuses E0 (the id is picked by the record's index); Zed and b joined a's
# history, and a's second delta record moved from M1 to a new match M3, so that
# M1 stays untouched.
SHARED_HISTORY = [
    _record(0, 1, 4),  # E0, match M0
    _record(1, 1, 3),  # M1: untouched by the delta
    _record(1, 2, 1),  # M1 corrected
    # M2's first record reuses E0 (3 % 3 = 0): a duplicate of M0's record, so
    # first acceptance drops it and the delta's record below (same revision)
    # is M2's accepted one. Re-deriving M2 without M0's E0 record would keep
    # the duplicate and reject the new record (and score 5 instead of 2).
    _record(2, 1, 5, kind=1),
    {**_record(0, 1, 6), "player": "Zed"},
    {**_record(0, 1, 2), "player": "b"},
    # The delta: one record of a's M2; Zed (shadowed) and a both change on the
    # same boards.
    _record(2, 1, 2),
    {**_record(1, 1, 3), "player": "Zed"},
    _record(3, 1, 1),
]
SHARED_SPLIT = 6


@pytest.fixture(scope="module")
def shadowed_chain(
    spark: SparkSession, redis_server: RedisServer
) -> Iterator[Settings]:
    """SHARED_HISTORY published as the Airflow phases do with Zed shadowed: g1
    full, g2 incremental, g3 full at g2's boundary."""
    lines = log_lines(SHARED_HISTORY)
    assert lines[3]["event"]["eventId"] == "E0"  # the duplicate
    client = redis.Redis.from_url(redis_server.url)
    flags = Keys(PLAYERS["Zed"]).flags
    client.hset(flags, "Zed", "shadow")
    try:
        with tempfile.TemporaryDirectory(prefix="incremental-") as tmp:
            settings = make_settings(Path(tmp), redis_server)
            append_bronze(spark, settings, lines[:SHARED_SPLIT])
            assert publish_with_flags(settings, spark) == "g1"
            append_bronze(spark, settings, lines[SHARED_SPLIT:])
            assert publish_with_flags(settings, spark) == "g2"
            assert publish_with_flags(settings, spark, full=True) == "g3"
            client.delete(flags)
            yield settings
    finally:
        client.delete(flags)
        client.close()


def test_incremental_rederives_only_touched_pairs(
    spark: SparkSession, shadowed_chain: Settings
) -> None:
    """A touched player's untouched matches are not re-derived: the build reads the
    delta's (player, match) pairs' records and the records sharing an eventId with
    them, not the player's whole history."""
    settings = shadowed_chain
    assert manifest(settings, "g1")["build"]["mode"] == "full"
    build = manifest(settings, "g2")["build"]
    assert build["mode"] == "incremental" and build["from"] == "g1"
    assert build["touchedPlayers"] == 2  # a and Zed
    # a's M2's two records and M0's record sharing E0, Zed's M1 record and a's
    # M3 record; not a's M1's two (the old build re-derived all six of a's
    # records and both of Zed's).
    assert build["rederivedRecords"] == 5
    assert build["touchedBoards"] == 12
    # The replaced totals (a's and Zed's rows): their old rows went by a DELETE
    # listing the players, into deletion vectors (jobs/incremental.py
    # replace_where), then the append. (No contribution was replaced: the pairs'
    # records before the delta derived none.)
    path = settings.delta_dir / "silver_totals"
    replaced = (
        spark.sql(f"DESCRIBE HISTORY delta.`{path}`")
        .where(F.col("operation").isin("DELETE", "MERGE"))
        .collect()
    )
    assert [r["operation"] for r in replaced] == ["DELETE"], replaced
    metrics = replaced[0]["operationMetrics"]
    assert metrics["numDeletedRows"] != "0", metrics
    assert metrics["numDeletionVectorsAdded"] != "0", metrics
    assert metrics["numCopiedRows"] == "0", metrics
    assert manifest(settings, "g3")["build"]["mode"] == "full"
    assert_same_generation(settings, "g2", "g3", spark)


def test_incremental_keeps_shadowed_players_hidden(
    spark: SparkSession, shadowed_chain: Settings
) -> None:
    """A player shadowed across an incremental build stays out of the rewritten
    boards' gold and in their hidden files (taken from silver by the build's
    shadowed players), byte for byte as a full build writes them."""
    settings = shadowed_chain
    g2 = manifest(settings, "g2")
    assert g2["build"]["mode"] == "incremental"
    assert g2["build"]["touchedBoards"] == 12
    meta = g2["boards"]["season:S4:eu"]
    hidden = read_arrow(settings.segments_dir / "g2" / meta["hidden"])
    assert hidden.to_pydict() == {"player_id": ["Zed"], "score": [9]}
    assert "Zed" not in {r[3] for r in gold_rows(spark, settings, "g2")}
    assert_same_generation(settings, "g2", "g3", spark)


def _event(player: str, occurred: str, region: str, **fields: Any) -> dict[str, Any]:
    return {
        "player": player,
        "match": 0,
        "revision": 1,
        "points": 4,
        "occurred": occurred,
        "region": region,
        "late": False,
        "kind": 0,
        **fields,
    }


def _boards(occurred: str, region: str) -> set[str]:
    config = BoardsConfig.model_validate(yaml.safe_load(BOARDS_YAML))
    return {s.board for s in boards_for_event(config, ts(occurred), region)}


def _strip_versions(spark: SparkSession, settings: Settings, generation: str) -> None:
    """Make ``generation`` look written by code before the versions side files: no
    ``versions`` map in its manifest (file and gold row), no side files."""
    directory = settings.segments_dir / generation
    body = manifest(settings, generation)
    for name in body.pop("versions").values():
        (directory / name).unlink()
    text = json.dumps(body, indent=1, ensure_ascii=False) + "\n"
    (directory / "manifest.json").write_text(text)
    DeltaTable.forPath(spark, str(settings.delta_dir / GOLD_MANIFEST)).update(
        F.col("generation") == generation, {"manifest_json": F.lit(text)}
    )


def test_versions_of_pairs_named_without_a_total(
    spark: SparkSession, redis_server: RedisServer
) -> None:
    """A held record names its boards without a total; a ``released`` record in
    the next delta (with other fields, so it names other boards) makes the held
    match count: those pairs' versions come from the previous generation's side
    file, not from the delta (on October's boards, named only by the release,
    and on November's na boards, with no row at all in g1, only the side file
    has them). ``no-side``: the previous generation predates side files, so the
    segments are written in full from the whole log's versions.

    Both cases continue from the same g1 (published once, then its data
    directory copied: Delta's logs and the manifests name files relative to
    their directory), and their logs stay equal, so one full recompute (g3 of
    ``side``) is what both incremental builds are compared with: two publishes
    fewer than publishing each case apart."""
    held_at, other_at, moved_to = OCCURRED[2], OCCURRED[0], OCCURRED[3]
    history = [
        _event("a", held_at, "na", kind=2),  # E0 held: names the na boards
        _event("c", held_at, "eu", points=3),
        # The delta: E0 released by a record naming October's na boards only, and
        # c's match corrected to the last day of November (equality only).
        _event("a", other_at, "na", kind=3),
        _event("c", moved_to, "eu", revision=2, points=3),
    ]
    lines = log_lines(history)
    assert lines[2]["event"]["eventId"] == "E0" and lines[2]["status"] == "released"
    released_only = _boards(held_at, "na") - _boards(other_at, "na")
    assert "daily:2026-11-16:na" in released_only
    with tempfile.TemporaryDirectory(prefix="incremental-") as tmp:
        side = make_settings(Path(tmp) / "side", redis_server)
        append_bronze(spark, side, lines[:2])
        assert run_publish(side, spark=spark, land=False, bucket_target=2) == "g1"
        g1_side = side_versions(side, "g1")
        # a's held pairs, on boards with no row at all (na) and beside c (global).
        assert {g1_side[(b, "a")] for b in released_only} == {1}
        assert "daily:2026-11-16:na" not in manifest(side, "g1")["boards"]
        no_side = make_settings(Path(tmp) / "no-side", redis_server)
        shutil.copytree(side.data_dir, no_side.data_dir)
        _strip_versions(spark, no_side, "g1")
        for settings, older_previous in ((side, False), (no_side, True)):
            append_bronze(spark, settings, lines[2:])
            g2 = run_publish(settings, spark=spark, land=False, bucket_target=2)
            assert g2 == "g2", older_previous
            build = manifest(settings, "g2")["build"]
            assert build["mode"] == "incremental"
            assert ("segments" in build) == older_previous
            for board in released_only:
                assert segment_version(settings, "g2", board, "a") == 1, board
            # The release names October's boards without a total there: side only.
            g2_side = side_versions(settings, "g2")
            for board in _boards(other_at, "na") - _boards(held_at, "na"):
                assert g2_side[(board, "a")] == 1, board
            if not older_previous:
                g3 = run_publish(
                    settings, spark=spark, land=False, bucket_target=2, full=True
                )
                assert g3 == "g3"
            # The same log in both directories: one full recompute for both.
            assert_same_generation(settings, "g2", "g3", spark, side)


def test_versions_of_a_total_that_vanishes_then_returns(
    spark: SparkSession, redis_server: RedisServer
) -> None:
    """A player shadowed at g2 leaves the segments (its pairs go to the side file
    with their versions); unshadowed at g3 with no record of its own in either
    delta, it returns with the version g1's log gave it, from g2's side file."""
    day = OCCURRED[2]
    history = [
        _event("a", day, "eu"),
        _event("b", day, "eu", points=2),
        _event("b", day, "eu", match=1, points=3),  # delta 1
        _event("b", day, "eu", match=2, points=1),  # delta 2
    ]
    lines = log_lines(history)
    boards = _boards(day, "eu")
    client = redis.Redis.from_url(redis_server.url)
    flags = Keys(PLAYERS["a"]).flags
    try:
        with tempfile.TemporaryDirectory(prefix="incremental-") as tmp:
            settings = make_settings(Path(tmp), redis_server)
            append_bronze(spark, settings, lines[:2])
            assert publish_with_flags(settings, spark) == "g1"
            client.hset(flags, "a", "shadow")
            append_bronze(spark, settings, lines[2:3])
            assert publish_with_flags(settings, spark) == "g2"
            assert manifest(settings, "g2")["build"]["mode"] == "incremental"
            side = side_versions(settings, "g2")
            for board in boards:
                assert segment_version(settings, "g2", board, "a") is None, board
                assert side[(board, "a")] == 1, board
            client.hdel(flags, "a")
            append_bronze(spark, settings, lines[3:])
            assert publish_with_flags(settings, spark) == "g3"
            assert manifest(settings, "g3")["build"]["mode"] == "incremental"
            for board in boards:
                assert segment_version(settings, "g3", board, "a") == 1, board
            assert publish_with_flags(settings, spark, full=True) == "g4"
            assert_same_generation(settings, "g3", "g4", spark)
    finally:
        client.delete(flags)
        client.close()


def test_players_condition_selects_exactly_the_listed_players(
    spark: SparkSession,
) -> None:
    """The totals' DELETE condition (jobs/incremental.py players_condition) names
    each player as a SQL literal: ids with a quote, a backslash or other letters
    select their own rows and no other (the API admits none of these characters
    but letters, so this is the literal's quoting, not a reachable id)."""
    odd = ["o'neil", "back\\slash", "ünï-çødé:1", "p.1_2", "'); DROP", "\\'"]
    rows = [(p, "b") for p in [*odd, "other", "o", "back"]]
    table = spark.createDataFrame(rows, "player_id string, board string")
    scope = spark.createDataFrame([(p,) for p in odd], "player_id string")
    condition = incremental.players_condition(scope)
    assert condition is not None
    picked = {r[0] for r in table.where(F.expr(condition)).collect()}
    assert picked == set(odd)
    assert incremental.players_condition(scope.limit(0)) is None
