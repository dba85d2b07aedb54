"""Scoring-rule promotions reach a running API without a restart.

``lb replay --promote`` rewrites ``$LB_DATA_DIR/rules/state.json`` while the API
serves. Before each request this middleware asks the app's
:class:`conf.rule_state.RuleStateWatcher` whether the state changed (at most one
``stat`` per interval) and, if so, hands the new effective boards to everything
that scores or describes boards: the speed layer (the rule of each board in the
owner transaction), the read service and ``GET /v1/boards``. Each worker process
has its own watcher, so every worker switches within one interval.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

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


class RuleReloadMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            state = scope["app"].state
            changed = state.rule_watcher.poll()
            if changed is not None:
                apply_boards(state, changed)
        await self.app(scope, receive, send)
