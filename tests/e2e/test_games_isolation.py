"""Two games with the same board, player, match and event ids on one real `lb up`
stack (issue 26, item 2): neither ever sees the other's events, live, in the
published generation (snapshot), approximate, friends, awards (the default game's
season closed, arena's of the same id left open) and `lb verify --game`.

One stack for the module; the default game's close is the only publish (its final
generation holds both games' boards); every wait polls. A close of a non-default
game (``arena~S9``, its awards and gold_awards rows) is
tests/jobs/test_games_publish.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.served import served_reads
from api.tokens import issue_player_token
from conf.settings import LOCAL_PLAYER_TOKEN_KEY, Settings
from jobs.season import close_season
from jobs.verify import run_verify
from speed.server import free_port
from tests.support.client_stack import wait_until
from tests.support.clients import SignedClient
from tests.support.lb import lb, stack_env

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BOARD = "season:S1:global"
GAMES = ("default", "arena")
# game -> player -> points of its one match; the same ids in both games.
POINTS = {
    "default": {"P1": 10, "P2": 30, "P3": 20},
    "arena": {"P1": 50, "P2": 5, "P3": 40},
}


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def expected(game: str) -> list[tuple[str, int, int]]:
    """(player, score, rank) of the game's board in display order."""
    rows = sorted(POINTS[game].items(), key=lambda kv: (-kv[1], kv[0]))
    return [(p, s, i + 1) for i, (p, s) in enumerate(rows)]


class GamesStack:
    def __init__(self, root: Path) -> None:
        self.data_dir = root / "lb"
        self.port = free_port()
        now = datetime.now(UTC)
        # An open season on any date; the closes below are run as of its cutoff.
        self.start, self.end = now - timedelta(days=1), now + timedelta(days=1)
        season = (
            "    regions: [eu, na]\n"
            "    seasons:\n"
            "      - id: S1\n"
            f'        start: "{iso(self.start)}"\n'
            f'        end: "{iso(self.end)}"\n'
            '        allowedLateness: "PT1S"\n'
            "        tiers: [{name: champion, top: 1}]\n"
        )
        self.boards = root / "games.yaml"
        self.boards.write_text(
            "games:\n" + "".join(f"  - id: {g}\n{season}" for g in GAMES)
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = stack_env(self.data_dir, LB_PARTITIONS="2", LB_API_WORKERS="1")
        env["LB_BOARDS_FILE"] = str(self.boards)
        return env

    def settings(self) -> Settings:
        return Settings(
            data_dir=self.data_dir,
            redis_url=(self.data_dir / "run" / "redis.url").read_text().strip(),
            partitions=2,
            rate_limit="off",
            boards_file=self.boards,
        )

    def post(self, path: str, payload: Any) -> httpx.Response:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            return SignedClient(http).post(path, payload)

    def put(self, path: str, payload: Any) -> httpx.Response:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            return SignedClient(http).put(path, payload)

    def get(self, path: str, **params: Any) -> Any:
        reply = httpx.get(f"{self.url}{path}", params=params, timeout=60)
        assert reply.status_code == 200, (path, reply.text)
        return reply.json()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GamesStack]:
    made = GamesStack(tmp_path_factory.mktemp("games-e2e"))
    started = lb("up", "--port", str(made.port), env=made.env)
    assert started.returncode == 0, started.stderr
    try:
        occurred = iso(datetime.now(UTC) - timedelta(minutes=5))
        for game, points in POINTS.items():
            events = [
                {
                    "eventId": f"{player}-m1",
                    "playerId": player,
                    "matchId": "m1",
                    "sourceRevision": 1,
                    "occurredAt": occurred,
                    "region": "eu",
                    "result": {"points": score},
                }
                for player, score in points.items()
            ]
            path = f"/v1/games/{game}/score-events:batch"
            reply = made.post(path, {"events": events})
            assert reply.status_code == 200, reply.text
            statuses = [r["status"] for r in reply.json()["results"]]
            assert statuses == ["accepted"] * len(events), reply.text
        # Friends are the player's own (no game in the path); read per game.
        reply = made.put("/v1/players/P1/friends", {"friends": ["P2"]})
        assert reply.status_code == 200, reply.text
        yield made
    finally:
        lb("down", env=made.env)


def entries(body: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(e["playerId"], e["score"], e["rank"]) for e in body["entries"]]


def prefix(game: str) -> str:
    return f"/v1/games/{game}/boards/{BOARD}"


def test_live_reads_are_per_game(stack: GamesStack) -> None:
    for game in GAMES:
        top = stack.get(f"{prefix(game)}/top")
        assert (top["exactness"], top["basis"]) == ("exact", "live"), top
        assert entries(top) == expected(game), game
        for player, score, rank in expected(game):
            body = stack.get(f"{prefix(game)}/players/{player}")
            assert (body["score"], body["rank"]) == (score, rank), (game, body)
    # The unprefixed paths are the game default.
    assert entries(stack.get(f"/v1/boards/{BOARD}/top")) == expected("default")


def test_friends_are_ranked_within_each_game(stack: GamesStack) -> None:
    token = issue_player_token(LOCAL_PLAYER_TOKEN_KEY.encode(), "P1")
    for game in GAMES:
        reply = httpx.get(
            f"{stack.url}{prefix(game)}/players/P1/friends",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        mine = [(p, s) for p, s, _ in expected(game) if p in ("P1", "P2")]
        assert [(e["playerId"], e["score"]) for e in reply.json()["entries"]] == mine


def test_close_publishes_snapshots_awards_and_verify_per_game(
    stack: GamesStack, spark: Any
) -> None:
    settings = stack.settings()
    closed = stack.end + timedelta(seconds=2)
    # One close (the game default's S1): its final generation publishes both
    # games' boards; arena's S1 (the same season id) stays open. (Until session 20
    # arena's S1 was closed too, a second publish: a close of a non-default game is
    # tests/jobs/test_games_publish.py's, awards and gold_awards rows.)
    snapshot = close_season(settings, "S1", spark=spark, now=closed)
    assert snapshot.version == 1
    # The close published; the API serves the latest generation (polled).
    numbers = [
        int(d.name[1:])
        for d in (stack.data_dir / "segments").iterdir()
        if d.name[:1] == "g" and d.name[1:].isdigit()
    ]
    latest = f"g{max(numbers)}"

    def serves_latest() -> bool:
        body = stack.get(f"{prefix('arena')}/top", mode="snapshot")
        return (body.get("generation") or {}).get("id") == latest

    assert wait_until(serves_latest, timeout=120), latest
    for game in GAMES:
        snap = stack.get(f"{prefix(game)}/top", mode="snapshot")
        assert snap["basis"] == "snapshot", snap
        assert entries(snap) == expected(game), (game, snap)
        assert entries(stack.get(f"{prefix(game)}/top")) == expected(game), game
        for player, _, rank in expected(game):
            approx = stack.get(f"{prefix(game)}/players/{player}", mode="approx")
            assert approx["exactness"] == "approximate", approx
            assert approx["population"] == len(POINTS[game]), (game, approx)
            assert abs(approx["rank"] - rank) <= approx["errorBound"], (game, approx)
        with served_reads(settings) as served:
            result = run_verify(
                settings, served, spark=spark, board=BOARD, sample=5, seed=1, game=game
            )
        assert result.ok, (game, result.divergences)
    # Awards: the default game's closed season, its own players and tiers; arena's
    # S1 (same season, board and player ids) not closed.
    awards = stack.get(f"{prefix('default')}/awards")
    assert [(e["playerId"], e["score"], e["tier"]) for e in awards["entries"]] == [
        (p, s, "champion" if r == 1 else None) for p, s, r in expected("default")
    ], awards
    missing = httpx.get(f"{stack.url}{prefix('arena')}/awards", timeout=60)
    assert missing.status_code == 404, missing.text
    assert missing.json()["error"] == "awards_not_found"
