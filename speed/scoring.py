"""The scoring step of a write: points of an event under its boards' rules.

Runs before the owner transaction: a record a rule cannot score, or scores beyond the
rule's per-match bound, never reaches Redis.
"""

from __future__ import annotations

from conf.boards import BoardsConfig, boards_for_event
from conf.rules import RuleRegistry
from speed.events import NormalizedEvent


def score_event(
    event: NormalizedEvent, boards: BoardsConfig, rules: RuleRegistry
) -> NormalizedEvent:
    """Fill ``event.scores`` and ``event.limits``.

    :raises conf.rules.RuleInputError: a field the rules need is missing or out of
        bounds.
    :raises conf.rules.Implausible: beyond a rule's points per match.
    """
    specs = boards_for_event(boards, event.occurred_at, event.event.region)
    event.scores = rules.score_all({spec.rule for spec in specs}, event.record)
    event.limits = rules.limits(event.scores)
    return event
