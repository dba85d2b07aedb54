"""bench/apply_profile.py edits the owner transaction by text: markers must match."""

from __future__ import annotations

import pytest

from bench.apply_profile import (
    ABLATIONS,
    REWRITES,
    SECTION_ENDS,
    ablated,
    with_sections,
)
from speed.scripts import APPLY_EVENT, source

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_every_ablation_changes_the_script(name: str) -> None:
    script = source(APPLY_EVENT)
    assert ablated(script, name) != script


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_every_rewrite_drops_the_totals_hash_write(name: str) -> None:
    # Both rewrites price designs without the per-board totals hash (issue 25
    # item 2): its HSET must be gone, or the variant measures main again.
    script = source(APPLY_EVENT)
    rewritten = ablated(script, name, REWRITES)
    assert 'redis.call("HSET", b.totals,' in script
    assert 'redis.call("HSET", b.totals,' not in rewritten


def test_sections_lap_every_marker() -> None:
    script = with_sections(source(APPLY_EVENT))
    for _, name in SECTION_ENDS:
        assert script.count(f'lap("{name}")') == 1
    assert script.rstrip().endswith("return out")
    assert 'lap("board_writes")' in script
