"""The leaderboard page in a real headless Chromium against a real stack.

Real redis-server, the API served by uvicorn over TCP, a generation published by Spark
into Delta, then more live events. The test searches a player and checks everything
the page shows against the API's JSON; screenshots go to test-output/web/.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pyspark.sql import SparkSession

from api.security import sign
from conf.settings import Settings
from jobs.season import close_season
from tests.live_server import serve
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, require_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "test-output" / "web"
# A season that stays open whatever today's date: the page test must not depend on it.
BOARDS_YAML = """\
regions: [eu, na]
seasons:
  - id: WEB
    start: "2026-01-01T00:00:00Z"
    end: "2100-01-01T00:00:00Z"
    aggregation: sum
    tiers:
      - {name: champion, top: 1}
      - {name: top10, top: 10}
"""
BOARD = "season:WEB:global"
MARKUP = "<b>Ana</b><img src=x>"
# close_season takes "now": the test closes the open-ended season as if in 2100.
AFTER_CLOSE = datetime(2100, 1, 2, tzinfo=UTC)


@dataclass
class Stack:
    url: str
    settings: Settings
    spark: SparkSession

    def post(self, events: list[dict[str, Any]]) -> None:
        body = orjson.dumps({"events": events})
        reply = httpx.post(
            f"{self.url}/v1/score-events:batch",
            content=body,
            headers={
                "X-Key-Id": "dev",
                "X-Signature": sign(b"dev-secret", body),
                "Content-Type": "application/json",
            },
            timeout=30,
        )
        reply.raise_for_status()
        statuses = {r.get("status") for r in reply.json()["results"]}
        assert statuses == {"accepted"}, reply.text

    def put_profile(self, player: str, profile: dict[str, str]) -> None:
        body = orjson.dumps(profile)
        reply = httpx.put(
            f"{self.url}/v1/players/{player}/profile",
            content=body,
            headers={
                "X-Key-Id": "dev",
                "X-Signature": sign(b"dev-secret", body),
                "Content-Type": "application/json",
            },
            timeout=30,
        )
        assert reply.status_code == 200, reply.text

    def get(self, path: str, **params: Any) -> Any:
        reply = httpx.get(f"{self.url}{path}", params=params, timeout=30)
        assert reply.status_code == 200, reply.text
        return reply.json()


def _event(player: str, match: str, points: int, region: str = "eu") -> dict[str, Any]:
    occurred = datetime.now(UTC) - timedelta(hours=1)
    return {
        "eventId": f"{player}-{match}",
        "playerId": player,
        "matchId": match,
        "sourceRevision": 1,
        "occurredAt": occurred.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "result": {"points": points},
        "kind": "result",
        "reason": None,
    }


@pytest.fixture
def stack(settings: Settings, spark: SparkSession, tmp_path: Path) -> Iterator[Stack]:
    from jobs.publish import run_publish
    from speed.rebase import rebase_published

    boards_file = tmp_path / "boards.yaml"
    boards_file.write_text(BOARDS_YAML)
    settings = settings.model_copy(update={"boards_file": boards_file})
    with serve(settings) as url:
        live = Stack(url, settings, spark)
        # 60 players, scores on a coarse grid so that many tie; two matches each.
        events = []
        for i in range(60):
            player = f"P{i:03d}"
            region = "eu" if i % 2 else "na"
            events.append(_event(player, "M1", (i * 7) % 13 * 10, region))
            events.append(_event(player, "M2", (i * 5) % 7 * 10, region))
        live.post(events)
        generation = run_publish(settings, spark=spark, bucket_target=6)
        rebase_published(settings, generation)
        # After the generation: live differs from the snapshot.
        live.post([_event("P007", "M3", 40), _event("P500", "M1", 60, "na")])
        # The leader has a display name that is markup: the page shows it as text.
        leader = live.get(f"/v1/boards/{BOARD}/top", limit=1)["entries"][0]
        live.put_profile(leader["playerId"], {"displayName": MARKUP, "country": "SE"})
        yield live


def _rows(page: Any, table: str) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        f"{table} tbody tr",
        """rows => rows.map(r => ({
            position: Number(r.dataset.position), rank: Number(r.dataset.rank),
            playerId: r.dataset.player, score: Number(r.dataset.score),
            rankText: r.querySelector('.rank').textContent,
            tie: r.classList.contains('tie'), me: r.classList.contains('me'),
            text: r.innerText}))""",
    )


def _entries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("position", "rank", "playerId", "score")
    return [{k: r[k] for k in keys} for r in rows]


def _label(entry: dict[str, Any]) -> str:
    """The player cell's text (app.js playerLabel)."""
    name = entry.get("displayName", entry["playerId"])
    return f"{name} ({entry['country']})" if "country" in entry else name


def _percent(value: float) -> str:
    return f"{value:.1f}%" if value >= 10 else f"{value:.2f}%"


def test_page_shows_what_the_api_says(stack: Stack) -> None:
    from playwright.sync_api import expect, sync_playwright

    require_chromium()
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            # The page's Content-Security-Policy refuses nothing it needs.
            page.on(
                "console",
                lambda message: (
                    errors.append(message.text)
                    if "Content Security Policy" in message.text
                    else None
                ),
            )
            page.goto(f"{stack.url}/?refresh=700#board={BOARD}")
            expect(page.locator("body")).to_have_attribute("data-ready", "true")
            assert page.locator("#board").input_value() == BOARD

            # Top list and labels, against the API's JSON.
            top = stack.get(f"/v1/boards/{BOARD}/top", limit=20, mode="live")
            rows = _rows(page, "#top")
            assert _entries(rows) == _entries(top["entries"])
            # Display names are text: the markup in the leader's name is shown as
            # typed, nothing of it became an element.
            assert top["entries"][0]["displayName"] == MARKUP
            cells = page.eval_on_selector_all(
                "#top tbody td.player", "cells => cells.map(c => c.textContent)"
            )
            assert cells == [_label(e) for e in top["entries"]]
            assert cells[0] == f"{MARKUP} (SE)"
            assert page.locator("main img, main b").count() == 0
            # A tie is a rank shared with anyone, also just below the list.
            ranks = [e["rank"] for e in stack.get(f"/v1/boards/{BOARD}/top")["entries"]]
            for row in rows:
                tied = ranks.count(row["rank"]) > 1
                assert row["tie"] == tied, row
                shown = f"{row['rank']}=" if tied else str(row["rank"])
                assert row["rankText"] == shown
                assert f"{row['score']:,}" in row["text"]
            assert any(r["tie"] for r in rows), "the data set is built to have ties"
            assert page.locator("#exactness").inner_text() == "exact"
            assert page.locator("#live-layer").is_hidden()
            assert page.locator("#basis").inner_text() == top["basis"] == "live"
            generation = top["generation"]["id"]
            expect(page.locator("#generation")).to_contain_text(
                f"generation {generation}, published"
            )
            expect(page.locator("#population")).to_have_text(
                f"{top['population']:,} players"
            )

            # Search a tied player: rank, top %, score and nearby, highlighted.
            tied_players = [r["playerId"] for r in rows if r["tie"]]
            player = tied_players[len(tied_players) // 2]
            page.fill("#player", player)
            page.click("#search button")
            result = page.locator("#player-result")
            expect(result).to_be_visible()
            rank = stack.get(f"/v1/boards/{BOARD}/players/{player}")
            expect(page.locator("#p-rank")).to_have_text(str(rank["rank"]))
            expect(page.locator("#p-top")).to_have_text(_percent(rank["topPercent"]))
            expect(page.locator("#p-score")).to_have_text(f"{rank['score']:,}")
            assert (
                float(page.locator("#p-top").get_attribute("data-value") or "")
                == (rank["topPercent"])
            )
            nearby = stack.get(f"/v1/boards/{BOARD}/players/{player}/nearby", radius=5)
            near_rows = _rows(page, "#nearby")
            assert _entries(near_rows) == _entries(nearby["entries"])
            assert [r["playerId"] for r in near_rows if r["me"]] == [player]
            for row in near_rows:
                assert row["tie"] == (ranks.count(row["rank"]) > 1), row
            assert "#board=" in page.url and f"player={player}" in page.url

            # The distribution chart is the generation's buckets.
            histogram = stack.get(f"/v1/boards/{BOARD}/histogram")
            bars = page.eval_on_selector_all(
                "#chart rect.bar",
                "bars => bars.map(b => [Number(b.dataset.lower), "
                "Number(b.dataset.count), b.classList.contains('me')])",
            )
            assert [(lo, n) for lo, n, _ in bars] == [
                (b["lower"], b["count"]) for b in histogram["buckets"]
            ]
            assert len(bars) >= 3
            assert sum(1 for *_, me in bars if me) <= 1
            expect(page.locator("#chart-basis")).to_contain_text(
                f"generation {histogram['generation']['id']} (basis snapshot"
            )
            # No awards before the season is closed (the API answers 404).
            assert page.locator("#awards-card").is_hidden()
            page.screenshot(path=str(OUTPUT / "desktop.png"), full_page=True)

            # Live refresh without reloading: a new leader appears by itself.
            page.evaluate("window.__sameDocument = true")
            stack.post([_event("NEWLEADER", "M1", 9990)])
            expect(page.locator("#top tbody tr").first).to_have_attribute(
                "data-player", "NEWLEADER", timeout=15_000
            )
            assert page.evaluate("window.__sameDocument") is True
            refreshed = stack.get(f"/v1/boards/{BOARD}/top", limit=20)
            expect(page.locator("#population")).to_have_text(
                f"{refreshed['population']:,} players"
            )

            # Snapshot mode reads the generation, labelled so.
            page.select_option("#mode", "snapshot")
            expect(page.locator("#basis")).to_have_text("snapshot")
            snap = stack.get(f"/v1/boards/{BOARD}/top", limit=20, mode="snapshot")
            page.wait_for_function(
                "n => document.querySelector('#top tbody tr')?.dataset.player === n",
                arg=snap["entries"][0]["playerId"],
            )
            assert _entries(_rows(page, "#top")) == _entries(snap["entries"])

            # Phone width: one column, nothing wider than the screen.
            phone = browser.new_page(
                viewport={"width": 390, "height": 844}, device_scale_factor=2
            )
            phone.goto(f"{stack.url}/#board={BOARD}&player={player}")
            expect(phone.locator("body")).to_have_attribute("data-ready", "true")
            expect(phone.locator("#player-result")).to_be_visible()
            width = phone.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"page is {width} px wide on a 390 px phone"
            phone.screenshot(path=str(OUTPUT / "phone.png"), full_page=True)

            # Closing the season: the awards appear, as the API serves them.
            close_season(stack.settings, "WEB", spark=stack.spark, now=AFTER_CLOSE)
            awards = stack.get(f"/v1/boards/{BOARD}/awards", limit=20)
            expect(page.locator("#awards-card")).to_be_visible(timeout=15_000)
            shown = page.eval_on_selector_all(
                "#awards tbody tr",
                "rows => rows.map(r => [...r.cells].map(c => c.textContent))",
            )
            assert shown == [
                [str(e["rank"]), _label(e), f"{e['score']:,}", e["tier"] or ""]
                for e in awards["entries"]
            ]
            assert len(shown) == 20 and any(e["tier"] for e in awards["entries"])
            expect(page.locator("#awards-meta")).to_contain_text(
                f"Season WEB, award version {awards['version']}"
            )
            page.screenshot(path=str(OUTPUT / "awards.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
    assert (OUTPUT / "desktop.png").stat().st_size > 10_000
