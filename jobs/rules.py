"""The scoring rules of ``conf/rules.py`` as Spark column expressions.

The batch layer takes a contribution's points from the log record's ``scores`` (what
the speed layer applied, per rule version). Where a record has no score under a
board's rule (a replay under a new rule, or a season switched to one), the points are
computed here from the recorded match record. ``tests/jobs/test_rules.py`` checks
every expression against the Python rule on the same records.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column
from pyspark.sql import functions as F

from conf.rules import RULE_VERSIONS, RuleRegistry


def _bounded(value: Column, low: int, high: int) -> Column:
    return value.isNotNull() & (value >= F.lit(low)) & (value <= F.lit(high))


def rule_column(registry: RuleRegistry, version: str, record: Column) -> Column:
    """Points of ``record`` (a struct with points, placement, kills, durationSeconds)
    under ``version``; null where the rule cannot score it (a field missing or out of
    its bounds), as the API would have refused it."""
    rule = registry.get(version)
    valid = F.lit(True)
    for bound in rule.fields:
        valid = valid & _bounded(record[bound.name], bound.low, bound.high)
    if version == "v1":
        points = record["points"]
    elif version == "v2":
        placement = F.greatest(F.lit(0), F.lit(105) - F.lit(5) * record["placement"])
        points = (
            placement
            + F.lit(10) * record["kills"]
            + F.floor(record["durationSeconds"] / F.lit(60)).cast("bigint")
        )
    else:  # pragma: no cover - RULE_VERSIONS lists every branch above
        raise KeyError(f"no Spark expression for rule {version!r}")
    return F.when(valid, points.cast("bigint"))


def scores_column(
    registry: RuleRegistry, record: Column, versions: tuple[str, ...] = RULE_VERSIONS
) -> Column:
    """Map version -> points under every rule in ``versions`` that can score it."""
    pairs = []
    for version in versions:
        pairs += [F.lit(version), rule_column(registry, version, record)]
    scored = F.create_map(*pairs)
    return F.map_filter(scored, lambda _, v: v.isNotNull())


def points_under(
    registry: RuleRegistry,
    rule: Column,
    scores: Column,
    record: Column,
    versions: Mapping[str, None] | tuple[str, ...] = RULE_VERSIONS,
) -> Column:
    """A record's points under the rule named by the ``rule`` column: the recorded
    score when there is one, else computed from the record."""
    computed = F.lit(None).cast("bigint")
    for version in versions:
        computed = F.when(
            rule == F.lit(version), rule_column(registry, version, record)
        ).otherwise(computed)
    return F.coalesce(F.try_element_at(scores, rule), computed)
