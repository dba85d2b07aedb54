"""A pure-Python oracle of the live boards, the writes that feed it and the publish
that rebases on it (live property tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import redis

from api.segments import GenerationRegistry
from conf.boards import board_rules
from conf.settings import Settings
from speed.partitions import CHANGED_BLOCK_ROWS, KEY_PREFIX, Keys
from speed.rebase import rebase
from tests.support.clients import SignedClient, event
from tests.support.segments import write_generation
from tests.support.settings import OPEN_WINDOWS_BOARDS, base_settings

PLAYERS = [f"p{i}" for i in range(7)] + ["Zed", "a-long-player-id"]


ALL_BOARDS = [
    f"{window}:{scope}"
    for window in (
        "season:S4",
        "daily:2026-11-20",
        "weekly:2026-W47",
        "monthly:2026-11",
        "alltime:all",
    )
    for scope in ("global", "eu", "na")
]


# Board options (issue 27) the property tests add to the open-windows boards: a
# best-of daily board, an asc weekly one and an asc best-of all-time one; per
# window: (aggregation, order).
OPTIONS_WINDOWS = (
    "windows:\n"
    "  daily: {aggregation: max}\n"
    "  weekly: {order: asc}\n"
    "  alltime: {order: asc, aggregation: best}\n"
)
OPTIONS_RULES = {
    "daily": ("max", "desc"),
    "weekly": ("sum", "asc"),
    "alltime": ("max", "asc"),
}


def options_settings(redis_url: str, directory: Path) -> Settings:
    """The tests' settings (base_settings) with the board options above."""
    path = directory / "options.yaml"
    path.write_text(OPEN_WINDOWS_BOARDS + OPTIONS_WINDOWS)
    return base_settings(redis_url, directory, boards_file=path)


# Two games with the same boards and players (API.md "Games", issue 26).
GAMES = ("default", "arena")


def games_settings(redis_url: str, directory: Path) -> Settings:
    """options_settings with the same boards for each of GAMES."""
    body = "".join(
        "    " + line + "\n"
        for line in (OPEN_WINDOWS_BOARDS + OPTIONS_WINDOWS).splitlines()
    )
    path = directory / "games.yaml"
    path.write_text("games:\n" + "".join(f"  - id: {g}\n{body}" for g in GAMES))
    return base_settings(redis_url, directory, boards_file=path)


def region(player: str) -> str:
    return "eu" if PLAYERS.index(player) % 2 == 0 else "na"


class Oracle:
    """Totals from first principles: first acceptance per (player, eventId); a match's
    contribution is its highest revision's points; totals sum contributions, or keep
    the best one per ``rules`` (window -> (aggregation, order)): the highest, the
    lowest under ``asc``, where display order is lower first too."""

    def __init__(self, rules: dict[str, tuple[str, str]] | None = None) -> None:
        self.rules = rules or {}
        self.events: set[tuple[str, str]] = set()
        self.revision: dict[tuple[str, str], int] = {}
        self.contribution: dict[tuple[str, str], int] = {}
        # Per (board, player): applied changes (the version the API reports).
        self.version: dict[tuple[str, str], int] = {}
        # Per (player, match): the event id of its held revision (quarantined).
        self.held: dict[tuple[str, str], str] = {}

    def apply(
        self,
        player: str,
        event_id: str,
        match: str,
        revision: int,
        points: int,
        held: bool = False,
    ) -> bool:
        """Whether the event changes the player's boards. A ``held`` event (points
        above a quarantine threshold) takes the match's revision and changes
        nothing (it waits for an admin's release)."""
        if (player, event_id) in self.events:
            return False
        self.events.add((player, event_id))
        if revision <= self.revision.get((player, match), 0):
            return False
        self.revision[(player, match)] = revision
        if held:
            self.held[(player, match)] = event_id
            return False
        self.contribution[(player, match)] = points
        self._count(player)
        return True

    def release(
        self, player: str, event_id: str, match: str, revision: int, points: int
    ) -> bool:
        """Whether releasing a held event changes the player's boards: only while
        no later revision replaced it (else it is superseded), as of acceptance."""
        if (
            self.revision.get((player, match)) != revision
            or self.held.get((player, match)) != event_id
        ):
            return False
        del self.held[(player, match)]
        self.contribution[(player, match)] = points
        self._count(player)
        return True

    def _count(self, player: str) -> None:
        for board in ALL_BOARDS:
            if board.rsplit(":", 1)[1] in ("global", region(player)):
                key = (board, player)
                self.version[key] = self.version.get(key, 0) + 1

    def versions(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (board, player), version in self.version.items():
            out.setdefault(board, {})[player] = version
        return out

    def rule(self, board: str) -> tuple[str, str]:
        return self.rules.get(board.split(":", 1)[0], ("sum", "desc"))

    def totals(self, board: str) -> dict[str, int]:
        scope = board.rsplit(":", 1)[1]
        aggregation, order = self.rule(board)
        pick = min if order == "asc" else max
        out: dict[str, int] = {}
        for (player, _), points in self.contribution.items():
            if scope in ("global", region(player)):
                if aggregation == "max" and player in out:
                    out[player] = pick(out[player], points)
                else:
                    out[player] = out.get(player, 0) + points
        return out

    def ordered(
        self, board: str, hidden: frozenset[str] = frozenset()
    ) -> list[dict[str, Any]]:
        """The board in display order with competition ranks, ``hidden`` (shadowed)
        players left out."""
        totals = {p: s for p, s in self.totals(board).items() if p not in hidden}
        sign = -1 if self.rule(board)[1] == "asc" else 1
        rows = sorted(totals.items(), key=lambda kv: (-sign * kv[1], kv[0].encode()))
        entries = []
        for i, (player, score) in enumerate(rows):
            rank = 1 + sum(1 for s in totals.values() if sign * s > sign * score)
            entries.append(
                {"position": i + 1, "rank": rank, "playerId": player, "score": score}
            )
        return entries

    def dense(self, board: str, hidden: frozenset[str] = frozenset()) -> dict[str, int]:
        """Each visible player's dense rank: 1 + distinct better scores (higher;
        lower under ``asc``) among the players not ``hidden``."""
        totals = {p: s for p, s in self.totals(board).items() if p not in hidden}
        sign = -1 if self.rule(board)[1] == "asc" else 1
        return {
            player: 1 + len({s for s in totals.values() if sign * s > sign * score})
            for player, score in totals.items()
        }


def send(
    api: SignedClient, oracle: Oracle, player: str, match: int, points: int
) -> None:
    event_id = f"{player}-{match}"
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=event_id,
            playerId=player,
            matchId=f"m{match}",
            region=region(player),
            result={"points": points},
        ),
    )
    assert reply.status_code == 200, reply.text
    oracle.apply(player, event_id, f"m{match}", 1, points)


def positions(client: redis.Redis, partitions: int) -> dict[str, int]:
    return {str(p): int(client.get(Keys(p).position) or 0) for p in range(partitions)}


def publish(
    api: SignedClient,
    client: redis.Redis,
    state: tuple[dict[str, int], dict[str, dict[str, int]], dict[str, dict[str, int]]],
    number: int,
    partitions: int,
    quarantine: dict[str, dict[str, int]] | None = None,
) -> None:
    """What `lb publish` does, with the oracle's state at the boundary standing in
    for Spark (versions too: the rebase then leaves the totals of players unchanged
    since the boundary out of Redis); ``quarantine``: the generation's thresholds."""
    boundary, totals, versions = state
    for p in range(partitions):
        keys = Keys(p)
        client.set(keys.landed, boundary[str(p)])
        client.xtrim(keys.log, minid=f"{boundary[str(p)] + 1}-0")
    segments_dir = api.client.app.state.settings.segments_dir
    # Generations hold oriented scores (conf/boards.py BoardRules): -score on asc
    # boards, as the Spark publisher writes them.
    config = api.client.app.state.reads.config
    boards = {
        b: {p: board_rules(config, b).orient(s) for p, s in t.items()}
        for b, t in totals.items()
        if t
    }
    write_generation(
        segments_dir,
        number,
        boards,
        boundary,
        bucket_target=2,
        versions=versions,
        quarantine=quarantine,
    )
    registry: GenerationRegistry = api.client.app.state.generations
    registry.refresh(force=True)
    generation = registry.by_number(number)
    assert generation is not None
    report = rebase(client, generation, partitions)
    assert set(report.partitions.values()) == {"ok"}


def publish_oracle(
    api: SignedClient,
    client: redis.Redis,
    oracle: Oracle,
    number: int,
    partitions: int,
) -> None:
    """:func:`publish` of generation ``number`` at the partitions' positions now,
    with the oracle's totals and versions there."""
    state = (
        positions(client, partitions),
        {b: oracle.totals(b) for b in ALL_BOARDS},
        oracle.versions(),
    )
    publish(api, client, state, number, partitions)


def assert_changed_counts(client: redis.Redis) -> None:
    """Every changed-set bitmap's per-block counts (Keys.changed_counts) equal its
    set bits per block of CHANGED_BLOCK_ROWS rows; a bitmap without counts has no
    set bit (lib/changed_counts.lua's invariant, which every writer keeps)."""
    for key in client.scan_iter(match=f"{KEY_PREFIX}:*:chb:*", count=1000):
        name = key.decode()
        bitmap: bytes = client.get(name) or b""  # type: ignore[assignment]
        bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8))
        per_block = (
            np.add.reduceat(
                bits.astype(np.int64),
                np.arange(0, max(len(bits), 1), CHANGED_BLOCK_ROWS),
            )
            if len(bits)
            else np.zeros(0, np.int64)
        )
        want = per_block.tolist()
        while want and want[-1] == 0:
            want.pop()
        raw: bytes = client.get(name.replace(":chb:", ":chc:", 1)) or b""  # type: ignore[assignment]
        have = np.frombuffer(raw, dtype=">u4").astype(np.int64).tolist()
        while have and have[-1] == 0:
            have.pop()
        assert have == want, (name, have, want)
