"""Scoring rules: a versioned registry of pure functions from a match record to points.

A board is (window, scope, scoring rule). Season boards use their season's ``rule``;
daily, weekly, monthly and all-time boards use the boards file's top-level ``rule``
(default ``v1``). A rule never changes once released: a new scoring is a new version,
replayed into its own namespace (``lb replay``) before a season switches to it.

Each rule declares the match-record fields it reads with their bounds (a value
outside them is 422 ``invalid_request`` naming the field) and its plausibility bounds
(422 ``implausible``, nothing applied):

* ``max_points_per_match``: checked here, on the record alone;
* ``max_points_per_minute``: points of a new match per minute of event time since the
  player's previous accepted match (checked in the owner transaction, which knows it);
* ``max_matches_per_hour``: accepted new matches of the player in the hour of event
  time up to this one (owner transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

# The match record's integer fields a rule may read (``result.<name>`` on the wire).
RECORD_FIELDS = ("points", "placement", "kills", "durationSeconds")
MS_PER_MINUTE = 60_000


class RuleInputError(ValueError):
    """The record lacks a field the rule needs, or a field is out of its bounds."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class Implausible(ValueError):
    """Beyond a plausibility bound of the rule; ``bound`` names which."""

    def __init__(self, bound: str, detail: str) -> None:
        super().__init__(detail)
        self.bound = bound
        self.detail = detail


@dataclass(frozen=True, slots=True)
class FieldBound:
    name: str
    low: int
    high: int


@dataclass(frozen=True, slots=True)
class Plausibility:
    max_points_per_match: int
    max_points_per_minute: int | None = None
    max_matches_per_hour: int | None = None


@dataclass(frozen=True, slots=True)
class ScoringRule:
    """One rule version: ``formula`` maps the bounded fields to the contribution."""

    version: str
    description: str
    fields: tuple[FieldBound, ...]
    plausibility: Plausibility
    formula: Callable[[Mapping[str, int]], int] = field(repr=False)

    def score(self, record: Mapping[str, int | None]) -> int:
        """Points of one match record.

        :raises RuleInputError: a needed field is missing or out of bounds.
        :raises Implausible: more than ``max_points_per_match``.
        """
        values: dict[str, int] = {}
        for bound in self.fields:
            value = record.get(bound.name)
            if value is None:
                raise RuleInputError(
                    f"result.{bound.name}",
                    f"required by scoring rule {self.version}",
                )
            if not bound.low <= value <= bound.high:
                raise RuleInputError(
                    f"result.{bound.name}",
                    f"must be an integer in [{bound.low}, {bound.high}] "
                    f"(scoring rule {self.version})",
                )
            values[bound.name] = value
        points = self.formula(values)
        limit = self.plausibility.max_points_per_match
        if points > limit:
            raise Implausible(
                "max_points_per_match",
                f"{points} points in one match under rule {self.version}; "
                f"at most {limit} are plausible",
            )
        return points

    def min_gap_ms(self, points: int) -> int:
        """Event time needed since the previous accepted match for ``points`` to stay
        within ``max_points_per_minute`` (0: no bound)."""
        per_minute = self.plausibility.max_points_per_minute
        if not per_minute or points <= 0:
            return 0
        # ceil(points / per_minute minutes), in ms, with integers only.
        return -(-points * MS_PER_MINUTE // per_minute)


def _v1(values: Mapping[str, int]) -> int:
    return values["points"]


def _v2(values: Mapping[str, int]) -> int:
    # Placement 1 earns 100, each place below 5 less (21st and later: 0); 10 per
    # kill; 1 per full minute survived. Mirrored for Spark by jobs/rules.py.
    placement = max(0, 105 - 5 * values["placement"])
    return placement + 10 * values["kills"] + values["durationSeconds"] // 60


V2_FIELDS = (
    FieldBound("placement", 1, 100),
    FieldBound("kills", 0, 50),
    FieldBound("durationSeconds", 60, 3600),
)


def rule_v1(points_min: int = 0, points_max: int = 1_000_000) -> ScoringRule:
    """``v1``: the server-reported ``result.points``, within the configured bounds."""
    return ScoringRule(
        version="v1",
        description="result.points as reported by the game server",
        fields=(FieldBound("points", points_min, points_max),),
        plausibility=Plausibility(max_points_per_match=points_max),
        formula=_v1,
    )


def rule_v2() -> ScoringRule:
    """``v2``: points derived from the match record; the client supplies none."""
    return ScoringRule(
        version="v2",
        description=(
            "max(0, 105 - 5 * placement) + 10 * kills + durationSeconds // 60"
        ),
        fields=V2_FIELDS,
        plausibility=Plausibility(
            max_points_per_match=400,
            max_points_per_minute=60,
            max_matches_per_hour=20,
        ),
        formula=_v2,
    )


RULE_VERSIONS = ("v1", "v2")


@dataclass(frozen=True, slots=True)
class RuleRegistry:
    """Every released rule by version."""

    rules: Mapping[str, ScoringRule]

    def get(self, version: str) -> ScoringRule:
        try:
            return self.rules[version]
        except KeyError:
            raise KeyError(f"unknown scoring rule {version!r}") from None

    def score_all(
        self, versions: Iterable[str], record: Mapping[str, int | None]
    ) -> dict[str, int]:
        """Points of the record under each of ``versions`` (sorted, each once)."""
        return {v: self.get(v).score(record) for v in sorted(set(versions))}

    def limits(self, scores: Mapping[str, int]) -> tuple[int, int]:
        """(min gap in ms since the previous match, max matches per hour; 0 = none)
        that the owner transaction enforces: the strictest of the rules in use."""
        gap = 0
        per_hour = 0
        for version, points in scores.items():
            rule = self.get(version)
            gap = max(gap, rule.min_gap_ms(points))
            hourly = rule.plausibility.max_matches_per_hour
            if hourly:
                per_hour = min(per_hour, hourly) if per_hour else hourly
        return gap, per_hour


def default_registry(points_min: int = 0, points_max: int = 1_000_000) -> RuleRegistry:
    return RuleRegistry({"v1": rule_v1(points_min, points_max), "v2": rule_v2()})
