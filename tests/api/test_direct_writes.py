"""The score-event writes are direct routes (api/direct.py): FastAPI answers them
without dependency injection, and what they answer is exactly what FastAPI's own
handler answers for the same routes: the same status, headers and bytes for the same
sequence of writes on the same (empty) store, refusals and store failures included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis
from fastapi.testclient import TestClient
from redis.exceptions import ConnectionError as RedisConnectionError

from api.main import create_app
from api.security import sign
from conf.settings import Settings
from tests.api.handlers import spy_injection, without_direct_handlers
from tests.conftest import DEV_SECRET, SignedClient, event

pytestmark = pytest.mark.integration

ONE = "/v1/score-events"
BATCH = "/v1/score-events:batch"
Answer = tuple[int, dict[str, str], bytes]


def raw_post(api: SignedClient, path: str, body: bytes, **headers: str) -> Any:
    return api.client.post(path, content=body, headers=headers)


def signed_headers(body: bytes, t: int | None = None) -> dict[str, str]:
    return {
        "X-Key-Id": "dev",
        "X-Signature": sign(DEV_SECRET, body, t) if t else sign(DEV_SECRET, body),
        "Content-Type": "application/json",
    }


def sequence(api: SignedClient) -> list[Any]:
    """Writes covering every outcome and refusal of the two routes."""
    bad_json = b'{"eventId": '
    limit = api.client.app.state.settings.max_body_bytes  # type: ignore[attr-defined]
    huge = b'{"events": [' + b" " * limit + b"]}"
    return [
        api.post(ONE, event()),
        api.post(ONE, event()),  # duplicate
        api.post(ONE, event(result={"points": 31})),  # 409 event_conflict
        api.post(ONE, event(eventId="E78", sourceRevision=1, matchId="M91")),
        api.post(ONE, event(eventId="bad/id")),
        api.post(ONE, event(region="mars")),
        api.post(ONE, event(eventId="E79", kind="correction")),  # reason missing
        api.post(ONE, event(eventId="E80", result={"points": 10**9})),  # implausible
        api.post(ONE, event(eventId="E81", occurredAt="2001-01-01T00:00:00Z")),
        api.post(ONE, {"eventId": "E82"}),
        raw_post(api, ONE, bad_json, **signed_headers(bad_json)),
        raw_post(api, ONE, orjson.dumps(event(eventId="E83"))),  # unsigned: 401
        raw_post(
            api,
            ONE,
            orjson.dumps(event(eventId="E84")),
            **signed_headers(b"another body"),
        ),
        raw_post(api, ONE, b"{}", **signed_headers(b"{}", t=1_000_000_000)),  # old
        raw_post(api, BATCH, huge, **signed_headers(huge)),  # 413
        api.post(
            BATCH,
            {
                "events": [
                    event(eventId="B1", playerId="P7", matchId="BM1"),
                    event(eventId="B2", playerId="P7", region="mars"),
                    event(),  # duplicate of the first write
                    event(result={"points": 32}),  # conflict
                    "not an object",
                    event(eventId="B3", playerId="P8", matchId="BM3", region="na"),
                ]
            },
        ),
        api.post(BATCH, {"events": []}),
        api.post(BATCH, {"events": "x"}),
        api.post(BATCH, {"events": [event()], "more": 1}),
        api.post(BATCH, [event()]),
        api.post(BATCH, {"events": [event()] * 1001}),
        # Not the write routes: FastAPI answers both ways.
        api.client.get(ONE),
        api.client.post(
            ONE + "/",
            content=b"{}",
            headers=signed_headers(b"{}"),
            follow_redirects=False,
        ),
        api.post("/v1/score-events:other", event()),
    ]


def answers(
    settings: Settings,
    redis_client: redis.Redis,
    run: Callable[[SignedClient], list[Any]],
) -> list[Answer]:
    redis_client.flushall()
    with TestClient(create_app(settings)) as client:
        replies = run(SignedClient(client))
    return [(r.status_code, dict(r.headers), r.content) for r in replies]


def test_direct_writes_answer_what_fastapi_answers(
    settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    solved = spy_injection(monkeypatch)
    direct = answers(settings, redis_client, sequence)
    # No write was dependency-injected (the three other requests have no route).
    assert solved == []
    without_direct_handlers(monkeypatch)
    routed = answers(settings, redis_client, sequence)
    assert solved.count("submit_score_event") == 14
    assert solved.count("submit_score_event_batch") == 7
    for n, (a, b) in enumerate(zip(direct, routed, strict=True)):
        assert a == b, n
    statuses = [status for status, _, _ in direct]
    assert set(statuses) == {200, 307, 401, 404, 405, 409, 413, 422}
    batch = orjson.loads(direct[15][2])["results"]
    assert [r.get("status") or r.get("error") for r in batch] == [
        "accepted",
        "invalid_request",
        "duplicate",
        "event_conflict",
        "invalid_request",
        "accepted",
    ]


def test_a_store_failure_is_the_same_503_both_ways(
    settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(api: SignedClient) -> list[Any]:
        async def down(*args: Any, **kwargs: Any) -> Any:
            raise RedisConnectionError("Connection refused")

        speed = api.client.app.state.speed  # type: ignore[attr-defined]
        monkeypatch.setattr(speed, "apply", down)
        return [
            api.post(ONE, event()),
            api.post(BATCH, {"events": [event()]}),
        ]

    direct = answers(settings, redis_client, failing)
    without_direct_handlers(monkeypatch)
    routed = answers(settings, redis_client, failing)
    assert direct == routed
    assert [status for status, _, _ in direct] == [503, 503]
    assert direct[0][1]["retry-after"] == "1"
