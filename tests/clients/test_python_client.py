"""The Python client (clients/python) against a real stack (``lb up``, the seed
events in Redis and a generation of their totals): signed writes, batches split at
1,000, redelivery after a lost answer or a 503 that never double-counts, errors as
exceptions, typed reads with their labels, cursors. The retry policy and the error
mapping without a stack are the unit tests at the end (httpx's MockTransport)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from leaderboard_client import (
    MAX_BATCH,
    AsyncLeaderboardClient,
    Backoff,
    EventConflict,
    EventError,
    EventResult,
    Forbidden,
    GenerationExpired,
    Invalid,
    LeaderboardClient,
    LeaderboardError,
    NotFound,
    OutcomeUnknown,
    RateLimited,
    TooOld,
    Unauthorized,
    Unavailable,
)

from api.tokens import issue_player_token
from tests.support.client_stack import (
    BOARD,
    KEY_ID,
    PLAYER_TOKEN_KEY,
    SECRET,
    ClientStack,
    occurred,
)

_ids = itertools.count()


def new_event(player: str, points: int = 10, **overrides: Any) -> dict[str, Any]:
    n = next(_ids)
    body: dict[str, Any] = {
        "eventId": f"py-E{n}",
        "playerId": player,
        "matchId": f"py-M{n}",
        "sourceRevision": 1,
        "occurredAt": occurred(),
        "region": "eu",
        "result": {"points": points},
    }
    body.update(overrides)
    return body


@pytest.fixture
def client(client_stack: ClientStack) -> Iterator[LeaderboardClient]:
    with LeaderboardClient(client_stack.url, KEY_ID, SECRET) as lb:
        yield lb


class LoseFirstAnswer(httpx.BaseTransport):
    """Sends every request to the real service; for the first ``fail`` writes, the
    service's answer is lost after it applied the request: a read timeout (the
    answer never came) or a 503 in its place (a proxy that gave up)."""

    def __init__(self, how: str, fail: int = 1) -> None:
        self.real = httpx.HTTPTransport()
        self.how = how
        self.fail = fail
        self.writes = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.real.handle_request(request)
        if request.method == "GET":
            return response
        self.writes += 1
        if self.writes > self.fail:
            return response
        response.read()
        response.close()
        if self.how == "timeout":
            raise httpx.ReadTimeout("simulated: the answer was lost", request=request)
        return httpx.Response(
            503,
            json={"error": "unavailable", "detail": "simulated proxy timeout"},
            headers={"Retry-After": "0"},
            request=request,
        )

    def close(self) -> None:
        self.real.close()


def no_sleep(_: float) -> None:
    return None


# -- against the real stack ---------------------------------------------------


@pytest.mark.e2e
def test_submit_returns_typed_statuses(client: LeaderboardClient) -> None:
    first = new_event("py-status", 40, matchId="py-status-M1")
    result = client.submit(first)
    assert isinstance(result, EventResult)
    assert (result.status, result.accepted, result.player_id) == (
        "accepted",
        True,
        "py-status",
    )
    assert result.board(BOARD) is not None
    assert result.status_on(BOARD) == "accepted"
    assert result.board(BOARD).total == 40  # type: ignore[union-attr]

    again = client.submit(first)
    assert again.duplicate and again.position == result.position

    older = new_event("py-status", 99, matchId="py-status-M1")  # revision 1 again
    assert client.submit(older).superseded

    fixed = new_event(
        "py-status",
        25,
        matchId="py-status-M1",
        sourceRevision=2,
        kind="correction",
        reason="scoring bug",
    )
    corrected = client.submit(fixed)
    assert corrected.accepted and corrected.board(BOARD).total == 25  # type: ignore[union-attr]
    assert client.rank(BOARD, "py-status").score == 25


@pytest.mark.e2e
def test_batch_splits_at_1000_and_keeps_the_order(client_stack: ClientStack) -> None:
    requests: list[int] = []

    def count(request: httpx.Request) -> None:
        if request.url.path.endswith(":batch"):
            requests.append(len(request.content))

    http = httpx.Client(
        base_url=client_stack.url, timeout=60, event_hooks={"request": [count]}
    )
    events = [new_event(f"py-batch-P{i}", 1 + i % 9) for i in range(MAX_BATCH + 5)]
    events[1002]["playerId"] = "not a valid id"
    with http, LeaderboardClient(client_stack.url, KEY_ID, SECRET, http=http) as lb:
        items = lb.submit_batch(events)
    assert len(requests) == 2
    assert len(items) == len(events)
    bad = items[1002]
    assert isinstance(bad, EventError) and bad.code == "invalid_request"
    assert isinstance(bad.exception(), Invalid)
    good = [item for i, item in enumerate(items) if i != 1002]
    assert all(isinstance(item, EventResult) and item.accepted for item in good)
    assert [item.event_id for item in good] == [
        e["eventId"] for i, e in enumerate(events) if i != 1002
    ]
    with LeaderboardClient(client_stack.url) as reader:
        assert (
            reader.rank(BOARD, "py-batch-P1004").score
            == events[1004]["result"]["points"]
        )


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["timeout", "503"])
def test_redelivery_after_a_lost_answer_counts_once(
    client_stack: ClientStack, how: str
) -> None:
    player = f"py-redeliver-{how}"
    transport = LoseFirstAnswer(how)
    sleeps: list[float] = []
    with LeaderboardClient(
        client_stack.url,
        KEY_ID,
        SECRET,
        transport=transport,
        sleep=sleeps.append,
        backoff=Backoff(base=0.01, cap=0.05),
    ) as lb:
        result = lb.submit(new_event(player, 17))
        # The first attempt was applied; the redelivery got its saved result.
        assert transport.writes == 2 and len(sleeps) == 1
        assert result.duplicate, result
        assert result.board(BOARD).total == 17  # type: ignore[union-attr]
        assert lb.rank(BOARD, player).score == 17

        # The same for a batch: every event of the lost request is counted once.
        transport.fail = transport.writes + 1
        batch = [new_event(f"{player}-B{i}", 3 + i) for i in range(4)]
        items = lb.submit_batch(batch)
        assert all(isinstance(i, EventResult) and i.duplicate for i in items), items
        for i in range(4):
            assert lb.rank(BOARD, f"{player}-B{i}").score == 3 + i


@pytest.mark.e2e
def test_write_errors_raise_their_codes(client_stack: ClientStack) -> None:
    with LeaderboardClient(client_stack.url, KEY_ID, "wrong-secret") as wrong:
        with pytest.raises(Unauthorized) as unauthorized:
            wrong.submit(new_event("py-err-auth"))
    assert (unauthorized.value.status, unauthorized.value.code) == (401, "unauthorized")

    with LeaderboardClient(client_stack.url, KEY_ID, SECRET) as lb:
        sent = new_event("py-err-conflict", 5)
        lb.submit(sent)
        with pytest.raises(EventConflict) as conflict:
            lb.submit({**sent, "result": {"points": 6}})
        assert (conflict.value.status, conflict.value.code) == (409, "event_conflict")
        (item,) = lb.submit_batch([{**sent, "result": {"points": 7}}])
        assert isinstance(item, EventError)
        assert isinstance(item.exception(), EventConflict)

        with pytest.raises(Invalid) as invalid:
            lb.submit(new_event("bad id!"))
        assert invalid.value.status == 422 and invalid.value.field == "playerId"

        with pytest.raises(TooOld) as too_old:
            lb.submit(new_event("py-err-old", occurredAt="2001-01-01T00:00:00Z"))
        assert (too_old.value.status, too_old.value.code) == (422, "too_old")

        # LB_RATE_LIMIT=5/60: new matches of one player beyond the burst wait.
        with pytest.raises(RateLimited) as limited:
            for _ in range(20):
                lb.submit(new_event("py-err-rate"))
        assert limited.value.status == 429
        assert limited.value.retry_after is not None and limited.value.retry_after > 0


@pytest.mark.e2e
def test_read_errors_raise_their_codes(client_stack: ClientStack) -> None:
    with LeaderboardClient(client_stack.url) as lb:
        with pytest.raises(NotFound) as board:
            lb.top("alltime:all:nowhere")
        assert board.value.code == "board_not_found"
        with pytest.raises(NotFound) as player:
            lb.rank(BOARD, "py-nobody")
        assert (player.value.status, player.value.code) == (404, "player_not_found")
        with pytest.raises(NotFound) as awards:
            lb.awards(BOARD)
        assert awards.value.code == "awards_not_found"
        with pytest.raises(Invalid) as limit:
            lb.top(BOARD, limit=0)
        assert limit.value.code == "invalid_request"


@pytest.mark.e2e
def test_reads_carry_their_labels(client_stack: ClientStack) -> None:
    expected = client_stack.expected_snapshot()
    with LeaderboardClient(client_stack.url) as lb:
        snapshot = lb.top(BOARD, 1000, mode="snapshot")
        assert (snapshot.mode, snapshot.basis, snapshot.exactness) == (
            "snapshot",
            "snapshot",
            "exact",
        )
        assert snapshot.error_bound == 0 and snapshot.exact
        assert snapshot.generation is not None
        assert snapshot.generation.id == client_stack.generation
        assert snapshot.generation.complete
        assert set(snapshot.generation.boundary) == {"0", "1"}
        assert snapshot.population == len(expected)
        seeded = [(e.player_id, e.score) for e in snapshot.entries]
        assert seeded == expected
        assert [e.position for e in snapshot.entries] == list(
            range(1, len(expected) + 1)
        )

        live = lb.top(BOARD, 10)
        assert (live.mode, live.basis) == ("live", "live")
        assert set(live.as_of) == {"0", "1"}
        assert all(position > 0 for position in live.as_of.values())

        player, score = expected[5]
        rank = lb.rank(BOARD, player, mode="snapshot")
        assert (rank.player_id, rank.score, rank.basis) == (player, score, "snapshot")
        assert rank.rank == 1 + sum(1 for _, s in expected if s > score)
        assert rank.top_percent == pytest.approx(100 * rank.rank / len(expected))

        nearby = lb.nearby(BOARD, player, radius=2, mode="snapshot")
        assert [e.player_id for e in nearby.entries] == [p for p, _ in expected[3:8]]
        assert nearby.player_id == player

        approx = lb.rank(BOARD, player, mode="approx")
        assert approx.mode == "approx" and approx.error_bound >= 0

        boards = {b.board: b for b in lb.boards()}
        assert boards[BOARD].window == "alltime"
        assert boards[BOARD].latest_generation == client_stack.generation


@pytest.mark.e2e
def test_iter_entries_walks_one_generation_by_cursor(client_stack: ClientStack) -> None:
    expected = client_stack.expected_snapshot()
    with LeaderboardClient(client_stack.url) as lb:
        first = lb.entries(BOARD, limit=7)
        assert first.cursors.before is None and first.cursors.after is not None
        assert first.basis == "snapshot"
        walked = [(e.player_id, e.score) for e in lb.iter_entries(BOARD, limit=7)]
    assert walked == expected


@pytest.mark.e2e
def test_friends_read_needs_the_players_token(client_stack: ClientStack) -> None:
    with LeaderboardClient(client_stack.url, KEY_ID, SECRET) as lb:
        for player, points in (("py-fr-A", 30), ("py-fr-B", 50), ("py-fr-C", 10)):
            lb.submit(new_event(player, points))
        assert lb.set_friends("py-fr-A", ["py-fr-B", "py-fr-C", "py-fr-A"]) == [
            "py-fr-B",
            "py-fr-C",
        ]
        token = issue_player_token(PLAYER_TOKEN_KEY.encode(), "py-fr-A")
        friends = lb.friends(BOARD, "py-fr-A", token)
        assert [(e.player_id, e.rank) for e in friends.entries] == [
            ("py-fr-B", 1),
            ("py-fr-A", 2),
            ("py-fr-C", 3),
        ]
        assert friends.basis == "live" and friends.exactness == "exact"
        with pytest.raises(Unauthorized):
            lb.friends(BOARD, "py-fr-A", "not-a-token")
        other = issue_player_token(PLAYER_TOKEN_KEY.encode(), "py-fr-B")
        with pytest.raises(Forbidden) as forbidden:
            lb.friends(BOARD, "py-fr-A", other)
        assert forbidden.value.status == 403


# -- the retry policy and the error mapping, without a stack --------------------


def mock_client(
    handler: Any, sleeps: list[float] | None = None, attempts: int = 4
) -> LeaderboardClient:
    return LeaderboardClient(
        "http://lb.test",
        KEY_ID,
        SECRET,
        transport=httpx.MockTransport(handler),
        max_attempts=attempts,
        sleep=(sleeps.append if sleeps is not None else no_sleep),
        backoff=Backoff(base=0.1, cap=1.0),
    )


@pytest.mark.unit
def test_attempts_are_bounded_and_resend_the_same_body() -> None:
    bodies: list[bytes] = []
    signatures: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        signatures.append(request.headers["X-Signature"])
        raise httpx.ConnectError("refused", request=request)

    sleeps: list[float] = []
    with pytest.raises(OutcomeUnknown) as unknown:
        mock_client(refuse, sleeps).submit(new_event("u-P1"))
    assert len(bodies) == 4 and len(set(bodies)) == 1
    assert all(s.startswith("t=") and ",v1=" in s for s in signatures)
    assert len(sleeps) == 3
    assert all(0 <= s <= min(1.0, 0.1 * 2**i) for i, s in enumerate(sleeps))
    assert unknown.value.status is None

    def busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": "unavailable", "detail": "down"})

    with pytest.raises(Unavailable) as unavailable:
        mock_client(busy, attempts=2).submit(new_event("u-P2"))
    assert unavailable.value.status == 503 and isinstance(
        unavailable.value, OutcomeUnknown
    )


@pytest.mark.unit
def test_a_409_or_422_is_not_retried() -> None:
    calls: list[int] = []

    def conflict(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(409, json={"error": "event_conflict", "detail": "x"})

    with pytest.raises(EventConflict):
        mock_client(conflict).submit(new_event("u-P3"))
    assert calls == [1]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("status", "body", "headers", "expected", "code"),
    [
        (429, {"error": "rate_limited", "detail": "x"}, {"Retry-After": "7"},
         RateLimited, "rate_limited"),
        (410, {"error": "generation_expired", "detail": "x", "latestGeneration": "g9"},
         {}, GenerationExpired, "generation_expired"),
        (404, {"error": "game_not_found", "detail": "x"}, {}, NotFound,
         "game_not_found"),
        (422, {"error": "implausible", "detail": "x", "bound": "max"}, {}, Invalid,
         "implausible"),
        (401, {"error": "unauthorized", "detail": "x"}, {}, Unauthorized,
         "unauthorized"),
        (418, {"error": "teapot", "detail": "x"}, {}, LeaderboardError, "teapot"),
    ],
)  # fmt: skip
def test_error_answers_map_to_exceptions(
    status: int,
    body: dict[str, Any],
    headers: dict[str, str],
    expected: type,
    code: str,
) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body, headers=headers)

    with pytest.raises(expected) as raised:
        mock_client(answer).top(BOARD)
    error = raised.value
    assert (error.status, error.code, error.body) == (status, code, body)
    if status == 429:
        assert error.retry_after == 7
    if status == 410:
        assert error.latest_generation == "g9"


@pytest.mark.unit
def test_per_board_statuses_are_typed() -> None:
    body = {
        "eventId": "E1",
        "playerId": "P1",
        "status": "accepted",
        "boards": [
            {"board": "season:S4:global", "total": 0, "version": 3,
             "status": "late-review"},
            {"board": BOARD, "total": 40, "version": 4},
        ],
        "partition": 1,
        "position": 12,
    }  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    result = mock_client(answer).submit(new_event("P1"))
    assert result.accepted and not result.late_review
    assert result.status_on("season:S4:global") == "late-review"
    assert result.status_on(BOARD) == "accepted"
    assert result.status_on("daily:x:global") is None
    assert (result.partition, result.position) == (1, 12)


@pytest.mark.unit
def test_the_client_imports_only_httpx_and_the_standard_library() -> None:
    import ast
    import sys
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
    imported: set[str] = set()
    for path in source.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    outside = imported - set(sys.stdlib_module_names) - {"httpx", "leaderboard_client"}
    assert "httpx" in imported and not outside, outside


@pytest.mark.unit
def test_game_paths_and_a_batch_cut_off_keep_what_was_answered() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if len(seen) > 1:
            raise httpx.ReadTimeout("lost", request=request)
        results = [
            {
                "eventId": e["eventId"],
                "playerId": e["playerId"],
                "status": "accepted",
                "boards": [],
                "partition": 0,
                "position": i,
            }
            for i, e in enumerate(json.loads(request.content)["events"])
        ]
        return httpx.Response(200, json={"results": results})

    lb = mock_client(answer, attempts=2)
    lb.game = "arena"
    with pytest.raises(OutcomeUnknown) as unknown:
        lb.submit_batch([new_event(f"u-G{i}") for i in range(3)], batch_size=2)
    assert seen == ["/v1/games/arena/score-events:batch"] * 3
    assert [item.status for item in unknown.value.completed or []] == ["accepted"] * 2


# -- the asyncio client: the same behaviour, awaited ---------------------------


class AsyncLoseFirstAnswer(httpx.AsyncBaseTransport):
    """:class:`LoseFirstAnswer` for httpx's AsyncClient."""

    def __init__(self) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.writes = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.real.handle_async_request(request)
        if request.method == "GET":
            return response
        self.writes += 1
        if self.writes > 1:
            return response
        await response.aread()
        await response.aclose()
        raise httpx.ReadTimeout("simulated: the answer was lost", request=request)

    async def aclose(self) -> None:
        await self.real.aclose()


@pytest.mark.e2e
def test_async_client_redelivers_once_and_reads(client_stack: ClientStack) -> None:
    expected = client_stack.expected_snapshot()

    async def scenario() -> None:
        transport = AsyncLoseFirstAnswer()
        sleeps: list[float] = []

        async def record(delay: float) -> None:
            sleeps.append(delay)

        async with AsyncLeaderboardClient(
            client_stack.url, KEY_ID, SECRET, transport=transport, sleep=record
        ) as lb:
            result = await lb.submit(new_event("py-async", 23))
            assert transport.writes == 2 and len(sleeps) == 1
            assert result.duplicate and (await lb.rank(BOARD, "py-async")).score == 23
            (item,) = await lb.submit_batch([new_event("py-async-B", 4)])
            assert isinstance(item, EventResult) and item.accepted
            top = await lb.top(BOARD, 1000, mode="snapshot")
            assert top.generation is not None
            assert top.generation.id == client_stack.generation
            assert [(e.player_id, e.score) for e in top.entries] == expected
            walked = [(e.player_id, e.score) async for e in lb.iter_entries(BOARD)]
            assert walked == expected
            with pytest.raises(NotFound):
                await lb.rank(BOARD, "py-async-nobody")

    asyncio.run(scenario())


@pytest.mark.unit
def test_async_client_attempts_are_bounded() -> None:
    calls: list[bytes] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request.content)
        raise httpx.ConnectError("refused", request=request)

    async def no_wait(_: float) -> None:
        return None

    async def scenario() -> None:
        async with AsyncLeaderboardClient(
            "http://lb.test",
            KEY_ID,
            SECRET,
            transport=httpx.MockTransport(refuse),
            max_attempts=3,
            sleep=no_wait,
        ) as lb:
            with pytest.raises(OutcomeUnknown):
                await lb.submit(new_event("u-async"))

    asyncio.run(scenario())
    assert len(calls) == 3 and len(set(calls)) == 1
