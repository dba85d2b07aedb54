"""The direct path for hot reads (api/fast_reads.py) answers exactly what the FastAPI
routes answer: same status, headers and bytes, for well-formed requests (which it
answers itself) and for everything else (which it hands to FastAPI)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

import api.fast_reads as fast_reads
from api.tokens import issue_player_token
from conf.settings import Settings
from speed.partitions import Keys
from speed.rebase import rebase
from tests.conftest import SignedClient, event
from tests.support.segments import write_generation
from tests.support.shadow import flag, seed

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
SEED = {"P1": 920, "P2": 900, "P3": 900, "P4": 880, "P5": 10, "Jos\u00e9": 500}
B = f"/v1/boards/{BOARD}"

# Answered by the direct path.
PLAIN = [
    f"{B}/top",
    f"{B}/top?limit=3",
    f"{B}/top?limit=1000&mode=snapshot",
    f"{B}/top?mode=approx&limit=2",
    f"{B}/top?generation=g1",
    f"{B}/players/P3",
    f"{B}/players/P%33",  # the path is matched decoded, as the router does
    f"{B}/players/P3?mode=snapshot",
    f"{B}/players/P3?mode=approx",
    f"{B}/players/P9?mode=approx",
    f"{B}/players/P9",
    f"{B}/players/P3?generation=g1",
    f"{B}/players/P3?generation=g7",
    f"{B}/players/P3?generation=bogus",
    f"{B}/players/P2/nearby",
    f"{B}/players/P2/nearby?radius=0",
    f"{B}/players/P2/nearby?radius=100&mode=snapshot",
    f"{B}/players/P2/nearby?mode=approx",
    f"{B}/players/P1",  # shadowed: no token reads as its own
    f"{B}/players/Jose\u0301",  # decomposed: NFC finds the composed id
    "/v1/boards/nope:x:y/top",
    "/v1/boards/nope:x:y/players/P1",
]
# Handed to FastAPI (its validation or routing decides).
ODD = [
    f"{B}/top?limit=0",
    f"{B}/top?limit=1001",
    f"{B}/top?limit=abc",
    f"{B}/top?limit=+5",
    f"{B}/top?limit=05",
    f"{B}/top?limit=",
    f"{B}/top?limit=3&limit=4",
    f"{B}/top?mode=exact",
    f"{B}/top?unknown=1",
    f"{B}/top?generation=" + "g" * 33,
    f"{B}/top/",  # the router redirects it
    f"{B}/players/P3?mode=snap%73hot",
    f"{B}/players/P2/nearby?radius=101",
    f"{B}/players/P2/nearby?radius=-1",
    f"{B}/players/P2/elsewhere",
    f"{B}/players//nearby",
    f"{B}/entries?limit=2",
    "/v1/boards",
]


@pytest.fixture
def loaded(
    api: SignedClient, settings: Settings, redis_client: redis.Redis
) -> SignedClient:
    """A generation g1 of SEED as the base, one player changed since, P1 shadowed."""
    seed(api, SEED)
    boundary = {
        str(p): int(redis_client.get(Keys(p).position) or 0)
        for p in range(settings.partitions)
    }
    for p in range(settings.partitions):
        redis_client.set(Keys(p).landed, boundary[str(p)])
    write_generation(settings.segments_dir, 1, {BOARD: SEED}, boundary, bucket_target=2)
    registry = api.client.app.state.generations
    registry.refresh(force=True)
    assert set(rebase(redis_client, registry.by_number(1), 4).partitions.values()) == {
        "ok"
    }
    reply = api.post(
        "/v1/score-events",
        event(eventId="late", playerId="P4", matchId="late", result={"points": 50}),
    )
    assert reply.status_code == 200, reply.text
    assert flag(api, "P1", "shadow").status_code == 200
    return api


def answers(
    api: SignedClient, urls: list[str], headers: dict[str, str] | None = None
) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    for url in urls:
        reply = api.client.get(url, headers=headers or {}, follow_redirects=False)
        out.append((reply.status_code, dict(reply.headers), reply.content))
    return out


def test_direct_answers_equal_fastapi_answers(
    loaded: SignedClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned: list[str] = []
    real_plan = fast_reads.plan

    def spy(scope: Any) -> Any:
        result = real_plan(scope)
        planned.append(scope["path"] + "?" + scope["query_string"].decode())
        return result

    token = issue_player_token(settings.player_token_secret, "P1")
    own = {"Authorization": f"Bearer {token}"}
    other = issue_player_token(settings.player_token_secret, "P2")
    others = {"Authorization": f"Bearer {other}"}
    bad = {"Authorization": "Bearer not-a-token"}
    own_urls = [f"{B}/players/P1", f"{B}/players/P1/nearby?radius=2"]
    monkeypatch.setattr(fast_reads, "plan", spy)
    direct = answers(loaded, PLAIN + ODD)
    direct_own = [
        *answers(loaded, own_urls, own),
        *answers(loaded, own_urls, others),
        *answers(loaded, own_urls, bad),
    ]
    # Every plain request went the direct way, no odd one did.
    assert len(planned) == len(PLAIN) + 3 * len(own_urls), planned

    def never(scope: Any) -> Any:
        raise fast_reads.FallThrough

    monkeypatch.setattr(fast_reads, "plan", never)
    routed = answers(loaded, PLAIN + ODD)
    routed_own = [
        *answers(loaded, own_urls, own),
        *answers(loaded, own_urls, others),
        *answers(loaded, own_urls, bad),
    ]
    for url, a, b in zip(PLAIN + ODD, direct, routed, strict=True):
        assert a == b, url
    assert direct_own == routed_own
    # The cases cover answers and refusals of both kinds.
    assert {status for status, _, _ in direct} >= {200, 307, 404, 422}
    # A shadowed player: itself (or no valid token) sees it, another player not.
    assert [status for status, _, _ in direct_own] == [200, 200, 404, 404, 200, 200]


def count(text: str, route: str, status: int) -> float:
    for line in text.splitlines():
        if (
            line.startswith("lb_http_requests_total{")
            and f'route="{route}"' in line
            and f'status="{status}"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_direct_reads_keep_their_route_in_the_metrics(
    loaded: SignedClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned: list[str] = []
    real_plan = fast_reads.plan

    def spy(scope: Any) -> Any:
        result = real_plan(scope)
        planned.append(scope["path"])
        return result

    monkeypatch.setattr(fast_reads, "plan", spy)
    top, rank = "/v1/boards/{board}/top", "/v1/boards/{board}/players/{player_id}"
    before = loaded.client.get("/metrics").text
    for _ in range(3):
        assert loaded.client.get(f"{B}/top?limit=3").status_code == 200
    assert loaded.client.get(f"{B}/players/nobody").status_code == 404
    after = loaded.client.get("/metrics").text
    assert len(planned) == 4
    assert count(after, top, 200) - count(before, top, 200) == 3
    assert count(after, rank, 404) - count(before, rank, 404) == 1
