"""The page's game selector (issue 26) in a real headless Chromium against the API
over TCP and a real redis-server (live reads only, no Spark): two games with the
same board id; the selector shows, and picking a game shows that game's board
only, with the game in the address."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from conf.settings import Settings
from tests.live_server import serve
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, require_chromium
from tests.support.clients import SignedClient, event
from tests.support.live import games_settings

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
BOARD = "season:S4:global"
# game -> player -> points; P1 in both games with other points.
# Generous waits of the page's reads on a loaded machine (milliseconds).
WAIT = 30_000
POINTS = {"default": {"P1": 5, "P2": 9, "P3": 7}, "arena": {"P1": 20, "Q1": 30}}


def _post(url: str, game: str, events: list[dict[str, Any]]) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        reply = SignedClient(http).post(
            f"/v1/games/{game}/score-events:batch", {"events": events}
        )
    assert reply.status_code == 200, reply.text
    assert {r["status"] for r in reply.json()["results"]} == {"accepted"}


def order(game: str) -> list[str]:
    return [p for p, _ in sorted(POINTS[game].items(), key=lambda kv: -kv[1])]


def test_the_game_selector_switches_boards(settings: Settings, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    require_chromium()
    assert settings.redis_url is not None
    served = games_settings(settings.redis_url, tmp_path)
    with serve(served) as url:
        for game, points in POINTS.items():
            _post(
                url,
                game,
                [
                    event(
                        eventId=f"e{p}",
                        playerId=p,
                        matchId=f"m{p}",
                        result={"points": n},
                    )
                    for p, n in points.items()
                ],
            )
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                page = browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(f"{url}/#board={BOARD}")
                expect(page.locator("body")).to_have_attribute(
                    "data-ready", "true", timeout=WAIT
                )
                expect(page.locator("#game-label")).to_be_visible(timeout=WAIT)
                options = page.eval_on_selector_all(
                    "#game option", "opts => opts.map(o => o.value)"
                )
                assert options == ["default", "arena"]
                rows = page.locator("#top tbody tr")

                def shown() -> list[str]:
                    return page.eval_on_selector_all(
                        "#top tbody tr", "rows => rows.map(r => r.dataset.player)"
                    )

                expect(rows).to_have_count(len(POINTS["default"]), timeout=WAIT)
                assert shown() == order("default")

                page.select_option("#game", "arena")
                expect(rows).to_have_count(len(POINTS["arena"]), timeout=WAIT)
                expect(rows.first).to_have_attribute("data-player", "Q1", timeout=WAIT)
                assert shown() == order("arena")
                assert "game=arena" in page.evaluate("location.hash")

                # The address keeps the game: a reload shows arena's board again.
                page.reload()
                expect(page.locator("body")).to_have_attribute(
                    "data-ready", "true", timeout=WAIT
                )
                expect(rows).to_have_count(len(POINTS["arena"]), timeout=WAIT)
                assert page.locator("#game").input_value() == "arena"
                assert shown() == order("arena")
                assert errors == []
            finally:
                browser.close()
