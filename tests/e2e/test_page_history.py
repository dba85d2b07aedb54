"""The page's "Why the rank changed" card (api/web/history.js), in a real headless
Chromium against the API over TCP (generations from the test writer, one
contribution in g2's contributions index): the rank chart has a point per
generation, the table lists each step's rank change and contributions, and text
from the data (here markup in a match id) is shown as text, never parsed."""

from __future__ import annotations

import pytest

from conf.settings import Settings
from speed.partitions import partition_of
from tests.live_server import serve
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, require_chromium
from tests.support.segments import write_contributions, write_generation

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
BOARD = "season:S4:global"
MARKUP = "<img src=x onerror=alert(1)>"


def test_the_page_shows_why_a_rank_changed(settings: Settings) -> None:
    from playwright.sync_api import expect, sync_playwright

    require_chromium()
    partition = partition_of("P3", settings.partitions)
    boundary = {str(p): 0 for p in range(settings.partitions)}
    write_generation(settings.segments_dir, 1, {BOARD: {"P1": 5, "P3": 9}}, boundary)
    later = {**boundary, str(partition): 1}
    write_generation(
        settings.segments_dir, 2, {BOARD: {"P1": 5, "P3": 2, "P4": 7}}, later
    )
    record = {
        "partition": partition,
        "position": 1,
        "status": "accepted",
        "event": {
            "eventId": "E1",
            "matchId": MARKUP,
            "kind": "correction",
            "occurredAt": "2026-11-20T10:00:00.000Z",
            "playerId": "P3",
        },
        "result": {
            "status": "accepted",
            "boards": [{"board": BOARD, "total": 2, "version": 2}],
        },
    }
    write_contributions(settings.segments_dir, 1, [], None)
    write_contributions(settings.segments_dir, 2, [record], 1)
    with serve(settings) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda dialog: errors.append(f"dialog {dialog.message}"))
            page.goto(f"{url}/?refresh=500#board={BOARD}&player=P3&mode=snapshot")
            card = page.locator("#history-card")
            expect(card).to_be_visible(timeout=60_000)
            expect(card).to_have_attribute("data-entries", "2")
            expect(page.locator("#history-chart circle")).to_have_count(2)
            rows = page.locator("#history tbody tr")
            expect(rows).to_have_count(2)
            # g1 -> g2: P3 fell from 1 to 3 (P1 and P4 now above it).
            expect(rows.nth(0)).to_contain_text("1 → 3")
            expect(rows.nth(0)).to_contain_text("+2 above")
            expect(rows.nth(0)).to_contain_text(f"E1 correction {MARKUP}: +2")
            expect(rows.nth(1)).to_contain_text("first listed")
            assert page.locator("#history img").count() == 0
            assert errors == []
        finally:
            browser.close()
