"""Rule state of a data dir: registered replays and promoted season rules.

``lb replay --season S --rule R`` registers the replay: every publish from then on
also computes the season under ``R`` into the namespace ``season:S@R:<scope>``
(readable like a board, not listed in ``GET /v1/boards``). ``--promote`` switches the
season itself to ``R``. The state is one small JSON file,
``$LB_DATA_DIR/rules/state.json``, written atomically; the boards file stays the
configuration, and :func:`effective_boards` applies the promotions to it.

Season ids in the state are internal ones (:func:`conf.boards.qualify`): ``S4`` of
the game ``default`` (so a state file written before games keeps meaning the same),
``arena~S4`` of the game ``arena``. Two games' seasons with the same id are two
replays, two promotions and two namespaces (``arena~season:S4@v2:<scope>``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from conf.boards import (
    DEFAULT_GAME,
    BoardsConfig,
    Season,
    game_of_board,
    qualify,
    split_board,
)

STATE_FILE = Path("rules") / "state.json"


@dataclass
class RuleState:
    # (internal season id, rule version) of every registered replay, in
    # registration order.
    replays: list[tuple[str, str]] = field(default_factory=list)
    # internal season id -> promoted rule version.
    promoted: dict[str, str] = field(default_factory=dict)


def state_path(data_dir: Path) -> Path:
    return Path(data_dir) / STATE_FILE


def load_rule_state(data_dir: Path) -> RuleState:
    path = state_path(data_dir)
    if not path.exists():
        return RuleState()
    raw = json.loads(path.read_text())
    return RuleState(
        replays=[(str(s), str(r)) for s, r in raw.get("replays", [])],
        promoted={str(k): str(v) for k, v in raw.get("promoted", {}).items()},
    )


def save_rule_state(data_dir: Path, state: RuleState) -> None:
    path = state_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"replays": state.replays, "promoted": state.promoted}, indent=1)
    )
    os.replace(tmp, path)


def namespace(season_id: str, rule: str) -> str:
    """The period of a replay's boards: ``season:<S>@<R>:<scope>``."""
    return f"{season_id}@{rule}"


def effective_boards(config: BoardsConfig, state: RuleState) -> BoardsConfig:
    """The boards file with promoted season rules applied (each game's own)."""
    if not state.promoted:
        return config

    def promoted(game: str, boards: BoardsConfig) -> BoardsConfig:
        seasons = [
            s.model_copy(update={"rule": state.promoted[key]})
            if (key := qualify(game, s.id)) in state.promoted
            else s
            for s in boards.seasons
        ]
        return boards.model_copy(update={"seasons": seasons})

    if not config.games:
        return promoted(DEFAULT_GAME, config)
    games = [promoted(g.id, g) for g in config.games]
    return config.model_copy(update={"games": games})


def namespace_seasons(config: BoardsConfig, state: RuleState) -> list[Season]:
    """One pseudo-season per registered replay: the season's window under the
    replay's rule, named ``<S>@<R>`` (board ids ``season:<S>@<R>:<scope>``), and
    ``<game>~<S>@<R>`` for a game other than default (its boards
    ``<game>~season:<S>@<R>:<scope>``, jobs/recompute.game_board_columns)."""
    out = []
    for season_id, rule in state.replays:
        boards, bare = game_of_board(config, season_id)
        season = boards.season(bare) if boards is not None else None
        if season is not None:
            game, _ = split_board(season_id)
            out.append(
                season.model_copy(
                    update={"id": qualify(game, namespace(bare, rule)), "rule": rule}
                )
            )
    return out


def describe_replay_board(config: BoardsConfig, board: str) -> dict[str, str] | None:
    """Like :func:`conf.boards.describe_board` for a replay's board
    ``season:<S>@<R>:<scope>`` (S a configured season of the board's game, R a
    released rule; internal ids, ``arena~season:S4@v2:eu``); None for anything
    else. Such boards are readable but not listed in ``GET /v1/boards``."""
    from conf.rules import RULE_VERSIONS

    game, board = game_of_board(config, board)
    if game is None:
        return None
    config = game
    parts = board.split(":")
    if len(parts) != 3 or parts[0] != "season" or parts[2] not in config.scopes:
        return None
    season_id, at, rule = parts[1].partition("@")
    season = config.season(season_id)
    if not at or season is None or rule not in RULE_VERSIONS:
        return None
    return {
        "window": "season",
        "period": parts[1],
        "scope": parts[2],
        "aggregation": season.aggregation,
        "order": season.order,
        "tieBreak": season.tie_break,
        "rule": rule,
    }


class RuleStateWatcher:
    """Tells a long-running process (the API) when the rule state changed.

    ``lb replay --promote`` switches a season's rule by replacing the state file
    while the API runs; events it accepts from then on must score under the new rule
    (the promotion's rebuild re-scores what came before). :meth:`poll` is cheap
    enough to call on every request: at most one ``stat`` per ``interval`` seconds,
    and the file is read only when its (inode, mtime, size) changed, which
    ``save_rule_state``'s atomic replace always changes (a new inode).
    """

    def __init__(
        self,
        config: BoardsConfig,
        data_dir: Path,
        interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.path = state_path(data_dir)
        self.interval = interval
        self.clock = clock
        self._signature = self._stat()
        self._next_check = clock()
        self.boards = effective_boards(config, load_rule_state(data_dir))

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def poll(self) -> BoardsConfig | None:
        """The new effective boards if the state changed since the last call."""
        now = self.clock()
        if now < self._next_check:
            return None
        self._next_check = now + self.interval
        signature = self._stat()
        if signature == self._signature:
            return None
        self._signature = signature
        self.boards = effective_boards(
            self.config, load_rule_state(self.path.parent.parent)
        )
        return self.boards
