"""Schemathesis fuzzing of the HTTP API from its own ``/openapi.json``.

Bounded (a few dozen examples per operation, derandomized) so it fits ``make test``.
Properties: no response is a 5xx, and every error answer has the JSON error shape
``{"error": "<code>", "detail": "..."}``; the signed write endpoints get bodies
signed by a hook, so the fuzzing reaches past the signature check. The API runs in
a real uvicorn server (with its lifespan) against the session's real redis-server.
"""

from __future__ import annotations

import collections
import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core import NotSet
from schemathesis.hooks import GLOBAL_HOOK_DISPATCHER

from api.main import create_app
from api.security import sign
from conf.settings import Settings
from speed.server import RedisServer
from tests.support.clients import DEV_SECRET
from tests.support.segments import write_generation

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served_api(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    data = Path(tmp_path_factory.mktemp("fuzz"))
    config = Settings(
        redis_url=redis_server.url, data_dir=data, partitions=4, rate_limit="off"
    )
    # A published generation, so snapshot reads and cursors have something to read.
    write_generation(
        config.segments_dir,
        1,
        {"season:S4:global": {"P1": 920, "P2": 900, "P3": 900}},
        {"0": 0, "1": 0, "2": 0, "3": 0},
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)
    sock.close()


BOARD = "season:S4:global"


def _on_real_board(case: schemathesis.Case) -> schemathesis.Case:
    # Random board ids are almost all 404: half the cases read a board that exists,
    # so the generated players, limits, cursors and modes reach the read paths.
    if case.path_parameters and "board" in case.path_parameters:
        case.path_parameters["board"] = BOARD
        if "player_id" in case.path_parameters:
            case.path_parameters["player_id"] = "P2"
    return case


def _strategy(operation: Any) -> st.SearchStrategy[schemathesis.Case]:
    cases = operation.as_strategy()
    return st.one_of(cases, cases.map(_on_real_board))


def test_no_5xx_and_errors_are_json(served_api: str) -> None:
    api = schemathesis.openapi.from_url(f"{served_api}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    # The premise: the friends read and the board reads are in the document.
    labels = {op.label for op in operations}
    assert "GET /v1/boards/{board}/players/{player_id}/friends" in labels
    assert "GET /v1/boards/{board}/top" in labels
    calls = 0
    for operation in operations:

        @given(case=_strategy(operation))
        @settings(
            max_examples=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            nonlocal calls
            calls += 1
            response = case.call(timeout=30)
            where = f"{case.method} {case.formatted_path}"
            assert response.status_code < 500, (where, response.text)
            if response.status_code >= 400:
                body = response.json()
                assert isinstance(body, dict), (where, response.text)
                assert isinstance(body.get("error"), str) and body["error"], where
                assert isinstance(body.get("detail"), str), (where, response.text)

        check()
    assert calls >= len(operations)


# The signed write endpoints, fuzzed with bodies that pass the signature check: a
# before_call hook signs each generated body as a game server would (API.md:
# X-Key-Id, X-Signature = HMAC-SHA256 over "<t>.<raw body>") and sends exactly the
# bytes it signed.
SIGNED_WRITES = {"POST /v1/score-events", "POST /v1/score-events:batch"}
WRITE_EXAMPLES = 150


def _sign_body(ctx: Any, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    if ctx.operation is None or ctx.operation.label not in SIGNED_WRITES:
        return
    # No body at all (NotSet) when the document gives none that can be generated.
    raw = b"" if isinstance(case.body, NotSet) else json.dumps(case.body).encode()
    kwargs["data"] = raw  # replaces schemathesis' own serialisation of the body
    case.headers.update(
        {
            "Content-Type": "application/json",
            "X-Key-Id": "dev",
            "X-Signature": sign(DEV_SECRET, raw),
        }
    )


def _plausible(body: Any, index: int) -> Any:
    """A generated event with the fields that are refused before the owner
    transaction (ids, time, region) made valid: the other generated fields
    (result, kind, reason, sourceRevision) then reach the scoring rules and Redis."""
    if not isinstance(body, dict):
        return body
    now = datetime.now(UTC).replace(microsecond=0)
    result = body.get("result")
    if isinstance(result, dict) and not isinstance(result.get("points"), int):
        # Every board's rule needs points: the other result fields stay generated.
        result = {**result, "points": index % 1000}
    return {
        **body,
        "eventId": f"F{index}",
        "playerId": f"FP{index % 17}",
        "matchId": f"FM{index % 29}",
        "occurredAt": (now - timedelta(minutes=index % 50)).isoformat(),
        "region": "eu",
        "result": result,
    }


def _write_strategy(operation: Any) -> st.SearchStrategy[schemathesis.Case]:
    cases = operation.as_strategy()
    counter = iter(range(10**9))

    def valid_ids(case: schemathesis.Case) -> schemathesis.Case:
        if isinstance(case.body, dict) and "events" in case.body:
            events = case.body["events"]
            if isinstance(events, list):
                case.body = {"events": [_plausible(e, next(counter)) for e in events]}
        else:
            case.body = _plausible(case.body, next(counter))
        return case

    return st.one_of(cases, cases.map(valid_ids))


def test_signed_writes_no_5xx(served_api: str) -> None:
    api = schemathesis.openapi.from_url(f"{served_api}/openapi.json")
    every = [result.ok() for result in api.get_all_operations()]
    operations = [op for op in every if op.label in SIGNED_WRITES]
    assert {op.label for op in operations} == SIGNED_WRITES
    statuses: collections.Counter[tuple[str, int]] = collections.Counter()
    GLOBAL_HOOK_DISPATCHER.register_hook_with_name(_sign_body, "before_call")
    try:
        for operation in operations:

            @given(case=_write_strategy(operation))
            @settings(
                max_examples=WRITE_EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case: schemathesis.Case) -> None:
                response = case.call(timeout=30)
                statuses[(case.operation.label, response.status_code)] += 1
                where = f"{case.method} {case.formatted_path}"
                assert response.status_code < 500, (where, case.body, response.text)
                assert response.status_code != 401, (where, response.text)
                if response.status_code >= 400:
                    body = response.json()
                    assert isinstance(body.get("error"), str) and body["error"], where
                    assert isinstance(body.get("detail"), str), (where, response.text)

            check()
    finally:
        GLOBAL_HOOK_DISPATCHER.unregister(_sign_body)
    # The premise: signed bodies got past the signature, and the single POST's
    # generated events reached the owner transaction (some were accepted).
    for label in SIGNED_WRITES:
        assert sum(n for (op, _), n in statuses.items() if op == label) >= 50, statuses
    assert statuses[("POST /v1/score-events", 200)] > 0, statuses
