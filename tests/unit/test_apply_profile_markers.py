"""bench/apply_profile.py edits the owner transaction by text: markers must match."""

from __future__ import annotations

import pytest

from bench.apply_profile import ABLATIONS, SECTION_ENDS, ablated, with_sections
from speed.scripts import APPLY_EVENT, source

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_every_ablation_changes_the_script(name: str) -> None:
    script = source(APPLY_EVENT)
    assert ablated(script, name) != script


def test_sections_lap_every_marker() -> None:
    script = with_sections(source(APPLY_EVENT))
    for _, name in SECTION_ENDS:
        assert script.count(f'lap("{name}")') == 1
    assert script.rstrip().endswith("return out")
    assert 'lap("board_writes")' in script
