"""Board options end to end (issue 27): an ``order: asc`` season (lower is better)
and an ``aggregation: max`` daily window (best single match), plus an asc best-of
all-time board, through POST score events and the reads (top, rank under every
ranking, nearby, approx), live and after a Spark publish, against a slow sort."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SignedClient, event
from tests.support.settings import OPEN_WINDOWS_BOARDS, base_settings

pytestmark = pytest.mark.integration

BOARDS_TEXT = (
    OPEN_WINDOWS_BOARDS.replace(
        "    aggregation: sum\n", "    aggregation: sum\n    order: asc\n", 1
    )
    + "windows:\n  daily: {aggregation: best}\n"
    "  alltime: {order: asc, aggregation: max}\n"
)
# board -> (aggregation, order)
RULES = {
    "season:S4:global": ("sum", "asc"),
    "daily:2026-11-20:global": ("max", "desc"),
    "alltime:all:eu": ("max", "asc"),
    "weekly:2026-W47:global": ("sum", "desc"),
}
RANKINGS = ("competition", "dense", "ordinal")
# (player, match, revision, points): ties, a downward correction, a correction of
# the best match, a zero.
EVENTS = [
    ("P1", "m1", 1, 30),
    ("P1", "m2", 1, 10),
    ("P2", "m1", 1, 20),
    ("P2", "m2", 1, 20),
    ("P3", "m1", 1, 40),
    ("P4", "m1", 1, 10),
    ("P4", "m2", 1, 30),
    ("P5", "m1", 1, 0),
    ("P3", "m1", 2, 5),  # correction down: P3's only match
    ("P1", "m1", 2, 50),  # correction up of P1's best match
    ("P6", "m1", 1, 40),
]
REGION = {"P1": "eu", "P2": "na", "P3": "eu", "P4": "eu", "P5": "na", "P6": "eu"}


@pytest.fixture
def settings(redis_url: str, redis_client: Any, tmp_path: Path) -> Any:
    path = tmp_path / "options.yaml"
    path.write_text(BOARDS_TEXT)
    return base_settings(redis_url, tmp_path, boards_file=path)


def totals(board: str) -> dict[str, int]:
    """The board's real totals from first principles."""
    aggregation, order = RULES[board]
    scope = board.rsplit(":", 1)[1]
    contribution: dict[tuple[str, str], tuple[int, int]] = {}
    for player, match, revision, points in EVENTS:
        if scope not in ("global", REGION[player]):
            continue
        if revision > contribution.get((player, match), (0, 0))[0]:
            contribution[(player, match)] = (revision, points)
    by_player: dict[str, list[int]] = {}
    for (player, _), (_, points) in contribution.items():
        by_player.setdefault(player, []).append(points)
    if aggregation == "sum":
        return {p: sum(v) for p, v in by_player.items()}
    best = min if order == "asc" else max
    return {p: best(v) for p, v in by_player.items()}


def slow_sort(board: str, ranking: str) -> list[dict[str, Any]]:
    scores = totals(board)
    asc = RULES[board][1] == "asc"

    def better(a: int, b: int) -> bool:
        return a < b if asc else a > b

    rows = sorted(scores.items(), key=lambda kv: (kv[1] if asc else -kv[1], kv[0]))
    out = []
    for i, (player, score) in enumerate(rows):
        if ranking == "competition":
            rank = 1 + sum(1 for s in scores.values() if better(s, score))
        elif ranking == "dense":
            rank = 1 + len({s for s in scores.values() if better(s, score)})
        else:
            rank = i + 1
        out.append(
            {"position": i + 1, "rank": rank, "playerId": player, "score": score}
        )
    return out


def post_all(api: SignedClient) -> None:
    for player, match, revision, points in EVENTS:
        reply = api.post(
            "/v1/score-events",
            event(
                eventId=f"{player}-{match}-{revision}",
                playerId=player,
                matchId=match,
                sourceRevision=revision,
                region=REGION[player],
                result={"points": points},
                kind="correction" if revision > 1 else "result",
                reason="fix" if revision > 1 else None,
            ),
        )
        assert reply.status_code == 200, reply.text
    # The write's totals are real scores.
    last = {b["board"]: b["total"] for b in reply.json()["boards"]}
    for board in RULES:
        if board in last:
            assert last[board] == totals(board)["P6"], board


def check_reads(api: SignedClient, mode: str) -> None:
    for board in RULES:
        for ranking in RANKINGS:
            want = slow_sort(board, ranking)
            params = {"mode": mode, "ranking": ranking}
            base = f"/v1/boards/{board}"
            top = api.get(f"{base}/top", params={**params, "limit": 100}).json()
            assert top["basis"] == mode, top
            assert top["entries"] == want, (board, ranking, mode)
            for i, entry in enumerate(want):
                player = entry["playerId"]
                me = api.get(f"{base}/players/{player}", params=params).json()
                assert (me["score"], me["rank"], me["position"]) == (
                    entry["score"],
                    entry["rank"],
                    i + 1,
                ), (board, ranking, mode, player)
                near = api.get(
                    f"{base}/players/{player}/nearby", params={**params, "radius": 1}
                ).json()
                assert near["entries"] == want[max(0, i - 1) : i + 2], (board, player)
        # Approximate ranks report the real score, the exact rank within the bound.
        exact = {e["playerId"]: e for e in slow_sort(board, "competition")}
        for player, entry in exact.items():
            approx = api.get(
                f"/v1/boards/{board}/players/{player}", params={"mode": "approx"}
            ).json()
            assert approx["score"] == entry["score"], (board, player)
            low = approx["rank"]
            assert low <= entry["rank"] <= low + approx["errorBound"], (board, player)


def test_asc_and_best_boards_live(api: SignedClient) -> None:
    post_all(api)
    listed = {b["board"]: b for b in api.get("/v1/boards").json()["boards"]}
    for board, (aggregation, order) in RULES.items():
        if board in listed:
            assert (listed[board]["aggregation"], listed[board]["order"]) == (
                aggregation,
                order,
            )
    assert listed["season:S4:global"]["order"] == "asc"
    check_reads(api, "live")


def test_asc_and_best_boards_after_a_publish(
    api: SignedClient, settings: Any, spark: Any
) -> None:
    """One Spark publish: the snapshot reads, the gold rows (real scores, ranked
    with lower better on asc boards), the histogram, and live reads merged onto
    the new generation after one more event."""
    from jobs.publish import run_publish
    from jobs.rebuild import run_rebuild
    from jobs.tables import GOLD_SNAPSHOTS
    from speed.rebase import rebase_published

    post_all(api)
    generation = run_publish(settings, spark=spark, bucket_target=2)
    # As `lb publish` does: the speed layer rebased onto the new generation.
    assert set(rebase_published(settings, generation).partitions.values()) == {"ok"}
    api.client.app.state.generations.refresh(force=True)
    check_reads(api, "snapshot")
    gold = (
        spark.read.format("delta")
        .load(str(settings.delta_dir / GOLD_SNAPSHOTS))
        .where(f"generation = '{generation}'")
        .collect()
    )
    for board in RULES:
        rows = sorted(
            (r["position"], r["rank"], r["player_id"], r["score"])
            for r in gold
            if r["board"] == board
        )
        want = [
            (e["position"], e["rank"], e["playerId"], e["score"])
            for e in slow_sort(board, "competition")
        ]
        assert rows == want, board
    # The histogram counts real scores: every player in the bucket holding its score.
    for board in RULES:
        body = api.get(f"/v1/boards/{board}/histogram").json()
        scores = totals(board)
        assert body["maxScore"] == max(scores.values())
        assert sum(b["count"] for b in body["buckets"]) == len(scores)
        for bucket in body["buckets"]:
            inside = [
                s
                for s in scores.values()
                if bucket["lower"] <= s
                and (bucket["upper"] is None or s < bucket["upper"])
            ]
            assert len(inside) == bucket["count"], (board, bucket)
    # Live on top of the generation: one more match for P2.
    EVENTS.append(("P2", "m3", 1, 1))
    try:
        post_all_new = EVENTS[-1:]
        for player, match, revision, points in post_all_new:
            reply = api.post(
                "/v1/score-events",
                event(
                    eventId=f"{player}-{match}-{revision}",
                    playerId=player,
                    matchId=match,
                    sourceRevision=revision,
                    region=REGION[player],
                    result={"points": points},
                ),
            )
            assert reply.status_code == 200, reply.text
        check_reads(api, "live")
        # The speed layer rebuilt from the generation and the logs is the same
        # (oriented totals, best-of zsets, changed-sets, Fenwick trees).
        assert run_rebuild(settings, spark=spark, dry_run=True).differences == []
    finally:
        EVENTS.pop()
