"""The page when reads need a token (LB_READ_AUTH=token), in a real headless Chromium
against the API over TCP and a real redis-server (live reads only, no Spark): it asks
for a token after a read answers 401, keeps it in sessionStorage, sends it as the
Bearer header, and asks again when the token is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from api.tokens import issue_reader_token
from conf.settings import Settings
from tests.live_server import serve
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, require_chromium
from tests.support.clients import SignedClient, event
from tests.support.settings import base_settings

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
BOARD = "season:S4:global"


def _post(url: str, events: list[dict[str, Any]]) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        reply = SignedClient(http).post("/v1/score-events:batch", {"events": events})
    assert reply.status_code == 200, reply.text


def test_the_page_asks_for_a_token(settings: Settings, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    require_chromium()
    assert settings.redis_url is not None
    guarded = base_settings(settings.redis_url, tmp_path, read_auth="token")
    token = issue_reader_token(guarded.player_token_secret, "web")
    with serve(guarded) as url:
        players = [f"P{i:02d}" for i in range(12)]
        _post(
            url,
            [
                event(
                    eventId=f"e{p}", playerId=p, matchId=f"m{p}", result={"points": n}
                )
                for n, p in enumerate(players, start=1)
            ],
        )
        top = httpx.get(
            f"{url}/v1/boards/{BOARD}/top",
            params={"limit": 20},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        ).json()
        assert len(top["entries"]) == len(players)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            try:
                page = browser.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(f"{url}/#board={BOARD}")
                # The first read answered 401: the page asks, reads nothing yet.
                expect(page.locator("#token-form")).to_be_visible()
                asked = page.locator("#token-error")
                expect(asked).to_contain_text("token is required")
                assert page.locator("body").get_attribute("data-ready") is None

                # A refused token is asked for again, with the API's reason.
                page.fill("#token", "not.a.jwt")
                page.click("#token-form button")
                expect(page.locator("#token-error")).to_contain_text("invalid token")
                expect(page.locator("#token-form")).to_be_visible()

                page.fill("#token", token)
                page.click("#token-form button")
                expect(page.locator("body")).to_have_attribute("data-ready", "true")
                expect(page.locator("#token-form")).to_be_hidden()
                expect(page.locator("#top tbody tr")).to_have_count(len(players))
                shown = page.eval_on_selector_all(
                    "#top tbody tr", "rows => rows.map(r => r.dataset.player)"
                )
                assert shown == [e["playerId"] for e in top["entries"]]
                stored = page.evaluate("sessionStorage.getItem('lb.readToken')")
                assert stored == token

                # A reload reads with the stored token once a read answers 401.
                page.reload()
                expect(page.locator("body")).to_have_attribute("data-ready", "true")
                assert page.locator("#token-form").is_hidden()
                expect(page.locator("#top tbody tr")).to_have_count(len(players))
                assert errors == []
            finally:
                browser.close()
