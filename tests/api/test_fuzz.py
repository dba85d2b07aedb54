"""Schemathesis fuzzing of the HTTP API from its own ``/openapi.json``.

Bounded (a few dozen examples per operation, derandomized) so it fits ``make test``.
Properties: no response is a 5xx, and every error answer has the JSON error shape
``{"error": "<code>", "detail": "..."}``. The API runs in a real uvicorn server
(with its lifespan) against the session's real redis-server.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.main import create_app
from conf.settings import Settings
from speed.server import RedisServer
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
