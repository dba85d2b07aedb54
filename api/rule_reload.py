"""Scoring-rule promotions reach a running API without a restart.

``lb replay --promote`` rewrites ``$LB_DATA_DIR/rules/state.json`` while the API
serves. Before each request the API's middleware (api/middleware.py) asks the app's
:class:`conf.rule_state.RuleStateWatcher` whether the state changed (at most one
``stat`` per interval) and, if so, hands the new effective boards to everything
that scores or describes boards: the speed layer (the rule of each board in the
owner transaction), the read service and ``GET /v1/boards``. Each worker process
has its own watcher, so every worker switches within one interval.
"""

from __future__ import annotations

from typing import Any

from conf.boards import BoardsConfig


def apply_boards(state: Any, boards: BoardsConfig) -> None:
    """Make ``boards`` the app's configuration (``state`` is ``app.state``)."""
    state.boards = boards
    speed = getattr(state, "speed", None)
    if speed is not None:
        speed.use_boards(boards)
    reads = getattr(state, "reads", None)
    if reads is not None:
        reads.use_boards(boards)


def reload_rules(state: Any) -> None:
    """Apply the effective boards if the rule state changed (``state`` is
    ``app.state``); asked before each request by api/middleware.py."""
    changed = state.rule_watcher.poll()
    if changed is not None:
        apply_boards(state, changed)
