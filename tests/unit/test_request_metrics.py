"""The per-request series of api/metrics.py: the mode label of a ranked read is
what ``parse_qs`` reads from its query (the scan of a plain query skips the
decoding only), and the cached children count into the same series as
``labels()`` does."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from api.metrics import RequestSeries, read_mode

pytestmark = pytest.mark.unit


def oracle(endpoint: str, query_string: bytes) -> str:
    """The label as api/main.py's ObserveMiddleware computed it (parse_qs)."""
    if endpoint == "entries":
        return "snapshot"
    if not query_string:
        return "live"
    query = parse_qs(query_string.decode("latin-1"))
    if "generation" in query:
        return "snapshot"
    mode = query.get("mode", ["live"])[0]
    return mode if mode in ("live", "snapshot", "approx") else "invalid"


PIECES = st.sampled_from(
    ["mode", "generation", "limit", "=", "&", "live", "snapshot", "approx", "x"]
    + ["%20", "%6Dode", "+", "1", "", "\u00e9", ";"]
)


@given(st.lists(PIECES, max_size=10).map("".join), st.sampled_from(["top", "rank"]))
@example("mode=&mode=approx", "top")  # a blank value does not count
@example("generation=&mode=snapshot", "rank")
@example("generation&mode=approx", "rank")  # a name alone does not count
@example("mode=approx&mode=live", "top")  # the first one counts
@example("limit=5&generation=g1&mode=live", "top")
@example("mode=snap+shot", "top")
@example("%6Dode=approx", "top")  # an escaped name
def test_the_mode_label_is_what_parse_qs_reads(query: str, endpoint: str) -> None:
    raw = query.encode("latin-1")
    assert read_mode(endpoint, raw) == oracle(endpoint, raw)


def test_entries_are_snapshot_reads() -> None:
    assert read_mode("entries", b"mode=live") == "snapshot"


def test_cached_children_count_into_the_labelled_series() -> None:
    series = RequestSeries()
    route = "/v1/boards/{board}/players/{player_id}"
    labels = {"route": route, "status": "404", "game": "default"}
    rank = {"endpoint": "rank", "mode": "approx"}

    def sample(name: str, labels: dict[str, str]) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = (
        sample("lb_http_requests_total", labels),
        sample("lb_http_request_seconds_count", {"route": route, "game": "default"}),
        sample("lb_rank_request_seconds_count", rank),
    )
    for _ in range(3):
        series.observe(route, 404, b"mode=approx", 0.001)
    series.observe("unmatched", 404, b"mode=approx", 0.001)  # not a ranked read
    after = (
        sample("lb_http_requests_total", labels),
        sample("lb_http_request_seconds_count", {"route": route, "game": "default"}),
        sample("lb_rank_request_seconds_count", rank),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [3, 3, 3]
