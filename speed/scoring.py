"""The scoring step of a write: points of an event under its boards' rules.

Runs before the owner transaction: a record a rule cannot score, or scores beyond the
rule's per-match bound, never reaches Redis.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from conf.boards import BoardsConfig
from conf.rules import RuleRegistry

if TYPE_CHECKING:
    # Only a type here: speed.events imports this module (validate_event scores).
    from speed.events import NormalizedEvent


def rules_for_event(boards: BoardsConfig, occurred_at: datetime) -> set[str]:
    """The scoring rules of the boards an event at ``occurred_at`` feeds: the rule
    of every rolling window (one always holds the moment: all-time) and of each
    season holding it. The same set as ``{spec.rule for spec in
    boards_for_event(...)}`` without building the board specs (a test checks it);
    the region changes which boards, never which rules."""
    rules = {boards.rule}
    for season in boards.seasons:
        if season.start <= occurred_at < season.end:
            rules.add(season.rule)
    return rules


def score_event(
    event: NormalizedEvent, boards: BoardsConfig, rules: RuleRegistry
) -> NormalizedEvent:
    """Fill ``event.scores`` and ``event.limits``.

    :raises conf.rules.RuleInputError: a field the rules need is missing or out of
        bounds.
    :raises conf.rules.Implausible: beyond a rule's points per match.
    """
    event.scores = rules.score_all(
        rules_for_event(boards, event.occurred_at), event.record
    )
    event.limits = rules.limits(event.scores)
    return event
