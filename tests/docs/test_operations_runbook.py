"""docs/OPERATIONS.md has an entry (a heading) for every alert of the Prometheus rules
file, and names every fault drill, so the runbook and the rules cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "docs" / "OPERATIONS.md"
RULES = REPO / "conf" / "prometheus" / "alerts.yml"
# The fault drills (`make drills`); the Spark standalone cluster's publish, run by
# `make drills` too, is no failure.
DRILLS = [
    REPO / "tests" / "drills" / name
    for name in ("test_drills.py", "test_stack_heals.py", "test_season_kill.py")
]


def alert_names() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [
        rule["alert"]
        for group in rules["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def headings() -> set[str]:
    return {
        m.group(1).strip()
        for m in re.finditer(r"^#{2,4} (.+)$", RUNBOOK.read_text(), re.M)
    }


def test_every_alert_has_a_runbook_entry() -> None:
    names = alert_names()
    assert len(names) >= 7, names  # premise: the rules file was read
    missing = [name for name in names if name not in headings()]
    assert not missing, f"alerts without a heading in docs/OPERATIONS.md: {missing}"


def test_every_drill_is_named_in_the_runbook() -> None:
    drills = [
        name
        for path in DRILLS
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.M)
    ]
    assert len(drills) >= 9, drills  # premise: every module's drills were found
    text = RUNBOOK.read_text()
    missing = [name for name in drills if f"`{name}`" not in text]
    assert not missing, f"drills not named in docs/OPERATIONS.md: {missing}"


def test_runbook_links_point_to_its_headings() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings()
    }
    links = re.findall(r"\]\(#([^)]+)\)", RUNBOOK.read_text())
    assert links, "premise: the runbook links its entries"
    broken = sorted(set(links) - anchors)
    assert not broken, broken
