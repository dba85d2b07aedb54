"""Snapshot reads over a published generation: top, rank, nearby, entries, pinning."""

from __future__ import annotations

from typing import Any

import pytest

from api.segments import GenerationRegistry
from tests.conftest import SignedClient
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SNAP = {"mode": "snapshot"}
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880}


@pytest.fixture
def published(api: SignedClient, settings: Any) -> SignedClient:
    write_generation(settings.segments_dir, 1, {BOARD: SEED}, {"0": 4, "1": 0})
    return api


def test_top_labels_and_competition_ranks(published: SignedClient) -> None:
    body = published.get(
        f"/v1/boards/{BOARD}/top", params={"limit": 3, "mode": "snapshot"}
    ).json()
    assert body["exactness"] == "exact"
    assert body["basis"] == "snapshot"
    assert body["errorBound"] == 0
    assert body["generation"]["id"] == "g1"
    assert body["generation"]["boundary"] == {"0": 4, "1": 0}
    assert body["population"] == 4
    assert body["entries"] == [
        {"position": 1, "rank": 1, "playerId": "P1", "score": 920},
        {"position": 2, "rank": 2, "playerId": "P2", "score": 900},
        {"position": 3, "rank": 2, "playerId": "P3", "score": 900},
    ]


def test_player_rank_and_top_percent(published: SignedClient) -> None:
    body = published.get(f"/v1/boards/{BOARD}/players/P3", params=SNAP).json()
    assert (body["score"], body["rank"], body["position"]) == (900, 2, 3)
    assert body["topPercent"] == 50.0
    missing = published.get(f"/v1/boards/{BOARD}/players/P9", params=SNAP)
    assert missing.status_code == 404
    assert missing.json()["error"] == "player_not_found"


def test_unknown_boards_are_404(published: SignedClient) -> None:
    for board in ("season:S9:global", "daily:2026-13:eu", "nope", "alltime:all:mars"):
        reply = published.get(f"/v1/boards/{board}/top")
        assert reply.status_code == 404, board
        assert reply.json()["error"] == "board_not_found"
    # A valid board nobody played on yet is empty, not an error.
    empty = published.get("/v1/boards/daily:2026-11-02:eu/top", params=SNAP).json()
    assert empty["entries"] == [] and empty["population"] == 0


def test_bad_query_parameters_are_422(published: SignedClient) -> None:
    for params in ({"limit": 0}, {"limit": 1001}, {"limit": "x"}, {"mode": "fast"}):
        reply = published.get(f"/v1/boards/{BOARD}/top", params=params)
        assert reply.status_code == 422, params
        assert reply.json()["error"] == "invalid_request"
    bad_cursor = published.get(f"/v1/boards/{BOARD}/entries", params={"cursor": "%%%"})
    assert bad_cursor.status_code == 422


def test_nearby_and_cursors(published: SignedClient) -> None:
    body = published.get(
        f"/v1/boards/{BOARD}/players/P2/nearby", params={"radius": 1, **SNAP}
    ).json()
    assert [e["playerId"] for e in body["entries"]] == ["P1", "P2", "P3"]
    assert body["cursors"]["before"] is None
    after = published.get(
        f"/v1/boards/{BOARD}/entries", params={"cursor": body["cursors"]["after"]}
    ).json()
    assert [e["playerId"] for e in after["entries"]] == ["P4"]
    assert after["cursors"]["after"] is None


def test_entries_pages_walk_both_ways(api: SignedClient, settings: Any) -> None:
    totals = {f"p{i:03d}": (i * 7) % 13 for i in range(60)}
    write_generation(settings.segments_dir, 1, {BOARD: totals})
    expected = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    seen: list[tuple[str, int]] = []
    page = api.get(f"/v1/boards/{BOARD}/entries", params={"limit": 7}).json()
    pages = [page]
    while True:
        seen += [(e["playerId"], e["score"]) for e in page["entries"]]
        if page["cursors"]["after"] is None:
            break
        page = api.get(
            f"/v1/boards/{BOARD}/entries",
            params={"limit": 7, "cursor": page["cursors"]["after"]},
        ).json()
        pages.append(page)
    assert seen == expected
    assert [e["position"] for p in pages for e in p["entries"]] == list(range(1, 61))
    # Walking back from the last page returns the previous pages exactly.
    back = api.get(
        f"/v1/boards/{BOARD}/entries",
        params={"limit": 7, "cursor": pages[-1]["cursors"]["before"]},
    ).json()
    assert back["entries"] == pages[-2]["entries"]


def test_generation_pinning_and_expiry(api: SignedClient, settings: Any) -> None:
    app_registry: GenerationRegistry = api.client.app.state.generations
    write_generation(settings.segments_dir, 1, {BOARD: SEED})
    first = api.get(f"/v1/boards/{BOARD}/entries", params={"limit": 2}).json()
    cursor = first["cursors"]["after"]
    for n in range(2, 5):
        write_generation(settings.segments_dir, n, {BOARD: {**SEED, "P4": 1000 + n}})
    app_registry.refresh(force=True)
    latest = api.get(f"/v1/boards/{BOARD}/top", params=SNAP).json()
    assert latest["generation"]["id"] == "g4"
    assert latest["entries"][0] == {
        "position": 1,
        "rank": 1,
        "playerId": "P4",
        "score": 1004,
    }
    pinned = api.get(f"/v1/boards/{BOARD}/top", params={"generation": "g2"}).json()
    assert pinned["generation"]["id"] == "g2"
    assert pinned["entries"][0]["score"] == 1002
    # g1 is older than the last 3: its cursor and explicit pins answer 410.
    for reply in (
        api.get(f"/v1/boards/{BOARD}/entries", params={"cursor": cursor}),
        api.get(f"/v1/boards/{BOARD}/top", params={"generation": "g1"}),
    ):
        assert reply.status_code == 410
        assert reply.json() == {
            "error": "generation_expired",
            "detail": "generation g1 is no longer retained",
            "latestGeneration": "g4",
        }
    assert (
        api.get(f"/v1/boards/{BOARD}/top", params={"generation": "g9"}).status_code
        == 404
    )


def test_boards_listing(published: SignedClient) -> None:
    boards = {b["board"]: b for b in published.get("/v1/boards").json()["boards"]}
    assert boards[BOARD]["latestGeneration"] == "g1"
    assert boards[BOARD]["aggregation"] == "sum"
    assert boards["season:S4:eu"]["latestGeneration"] is None
    assert boards[BOARD]["state"] in ("open", "closed")


def test_no_generation_yet(api: SignedClient) -> None:
    reply = api.get(f"/v1/boards/{BOARD}/top", params=SNAP)
    assert reply.status_code == 404
    assert reply.json()["error"] == "generation_not_found"


def test_a_new_generation_is_noticed_within_a_second(
    published: SignedClient, settings: Any
) -> None:
    import time

    assert (
        published.get(f"/v1/boards/{BOARD}/top", params=SNAP).json()["generation"]["id"]
        == "g1"
    )
    write_generation(settings.segments_dir, 2, {BOARD: {**SEED, "P9": 999}})
    deadline = time.monotonic() + 1.0
    seen = "g1"
    while seen != "g2" and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = published.get(f"/v1/boards/{BOARD}/top", params=SNAP).json()[
            "generation"
        ]["id"]
    assert seen == "g2"


@pytest.mark.parametrize(
    "board",
    [
        "daily:2026-13-45:na",
        "weekly:2025-W53:global",
        "monthly:2026-13:eu",
        "season:S9:global",
        "alltime:all:mars",
    ],
)
@pytest.mark.parametrize("path", ["top", "players/P1", "players/P1/nearby", "entries"])
def test_impossible_board_is_404_not_empty(api: Any, board: str, path: str) -> None:
    reply = api.get(f"/v1/boards/{board}/{path}")
    assert reply.status_code == 404, reply.text
    assert reply.json()["error"] == "board_not_found"
