"""GET /v1/boards/{board}/histogram (bucket counts of a generation) and the page."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import SignedClient
from tests.support.segments import equi_depth, write_generation

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
TOTALS = {f"P{i:03d}": (i * 37) % 500 for i in range(120)}


def test_histogram_is_the_generations_buckets(api: SignedClient, settings: Any) -> None:
    write_generation(settings.segments_dir, 1, {BOARD: TOTALS}, bucket_target=10)
    body = api.get(f"/v1/boards/{BOARD}/histogram").json()
    assert (body["exactness"], body["basis"], body["mode"]) == (
        "exact",
        "snapshot",
        "snapshot",
    )
    assert body["generation"]["id"] == "g1"
    assert body["population"] == len(TOTALS)
    assert body["maxScore"] == max(TOTALS.values())
    lowers, counts = equi_depth(list(TOTALS.values()), 10)
    assert [b["lower"] for b in body["buckets"]] == lowers
    assert [b["count"] for b in body["buckets"]] == counts
    assert [b["upper"] for b in body["buckets"]] == [*lowers[1:], None]
    # Every player is in exactly one bucket: [lower, upper).
    for bucket in body["buckets"]:
        upper = bucket["upper"] if bucket["upper"] is not None else 10**9
        inside = sum(1 for s in TOTALS.values() if bucket["lower"] <= s < upper)
        assert inside == bucket["count"]


def test_histogram_before_any_generation_is_404(api: SignedClient) -> None:
    none_yet = api.get(f"/v1/boards/{BOARD}/histogram")
    assert none_yet.status_code == 404
    assert none_yet.json()["error"] == "generation_not_found"


def test_histogram_errors_are_json(api: SignedClient, settings: Any) -> None:
    write_generation(settings.segments_dir, 1, {BOARD: TOTALS}, bucket_target=10)
    unknown = api.get("/v1/boards/season:S9:global/histogram")
    assert unknown.status_code == 404 and unknown.json()["error"] == "board_not_found"
    empty = api.get("/v1/boards/daily:2026-11-02:eu/histogram").json()
    assert empty["buckets"] == [] and empty["population"] == 0
    assert empty["maxScore"] is None


def test_histogram_is_documented_in_openapi(api: SignedClient) -> None:
    spec = api.get("/openapi.json").json()
    operation = spec["paths"]["/v1/boards/{board}/histogram"]["get"]
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/HistogramOut")
    fields = spec["components"]["schemas"]["HistogramOut"]["properties"]
    assert {"basis", "generation", "buckets", "maxScore"} <= set(fields)
    assert "404" in operation["responses"]


def test_page_and_assets_are_served(api: SignedClient) -> None:
    page = api.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="/web/app.js"' in page.text
    # No CDN: every asset the page names is served by the API itself.
    assert "http://" not in page.text.replace("http://www.w3.org", "")
    assert "https://" not in page.text
    for asset, kind in (("/web/app.js", "javascript"), ("/web/style.css", "css")):
        reply = api.get(asset)
        assert reply.status_code == 200, asset
        assert kind in reply.headers["content-type"]
    assert api.get("/web/../main.py").status_code == 404
    # The page is not part of the API's schema.
    assert "/" not in api.get("/openapi.json").json()["paths"]


def test_page_and_assets_send_security_headers(api: SignedClient) -> None:
    # Issue 23: no CSP, X-Frame-Options or nosniff on the page.
    for path in ("/", "/web/app.js", "/web/style.css"):
        reply = api.get(path)
        assert reply.status_code == 200, path
        headers = reply.headers
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp, path
        assert "frame-ancestors 'none'" in csp, path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["x-content-type-options"] == "nosniff", path
    # The policy refuses inline script: the page has none (no inline handler).
    page = api.get("/").text
    assert "<script>" not in page
    assert not re.search(r"\son[a-z]+=", page), re.search(r"\son[a-z]+=", page)
