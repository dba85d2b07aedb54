"""Rule state of a data dir: registered replays and promoted season rules.

``lb replay --season S --rule R`` registers the replay: every publish from then on
also computes the season under ``R`` into the namespace ``season:S@R:<scope>``
(readable like a board, not listed in ``GET /v1/boards``). ``--promote`` switches the
season itself to ``R``. The state is one small JSON file,
``$LB_DATA_DIR/rules/state.json``, written atomically; the boards file stays the
configuration, and :func:`effective_boards` applies the promotions to it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from conf.boards import BoardsConfig, Season

STATE_FILE = Path("rules") / "state.json"


@dataclass
class RuleState:
    # (season id, rule version) of every registered replay, in registration order.
    replays: list[tuple[str, str]] = field(default_factory=list)
    # season id -> promoted rule version.
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
    """The boards file with promoted season rules applied."""
    if not state.promoted:
        return config
    seasons = [
        s.model_copy(update={"rule": state.promoted[s.id]})
        if s.id in state.promoted
        else s
        for s in config.seasons
    ]
    return config.model_copy(update={"seasons": seasons})


def namespace_seasons(config: BoardsConfig, state: RuleState) -> list[Season]:
    """One pseudo-season per registered replay: the season's window under the
    replay's rule, named ``<S>@<R>`` (board ids ``season:<S>@<R>:<scope>``)."""
    out = []
    for season_id, rule in state.replays:
        season = config.season(season_id)
        if season is not None:
            out.append(
                season.model_copy(
                    update={"id": namespace(season_id, rule), "rule": rule}
                )
            )
    return out


def describe_replay_board(config: BoardsConfig, board: str) -> dict[str, str] | None:
    """Like :func:`conf.boards.describe_board` for a replay's board
    ``season:<S>@<R>:<scope>`` (S a configured season, R a released rule); None for
    anything else. Such boards are readable but not listed in ``GET /v1/boards``."""
    from conf.rules import RULE_VERSIONS

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
