"""Shared fixtures: a real redis-server per test session, signed-request helpers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from fastapi.testclient import TestClient

from api.main import create_app
from api.security import sign
from conf.settings import Settings
from speed.connection import sync_client
from speed.server import RedisServer

pytest_plugins = [
    "tests.fixtures_spark",
    "tests.fixtures_cluster",
    "tests.fixtures_redis_cluster",
]

DEV_SECRET = b"dev-secret"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="always").start()
    yield server
    server.stop()


# Tests that must hold on a Redis Cluster too take both backends:
#   @pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
# Every other test runs on the single server only.
BACKENDS = ["single", "cluster"]


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "single"))


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, redis_backend: str) -> str:
    """LB_REDIS_URL of the backend: the session's single server, or the session's
    three-master cluster (``redis+cluster://``), started on first use."""
    if redis_backend == "cluster":
        return str(request.getfixturevalue("redis_cluster"))
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = sync_client(redis_url)
    client.flushall()
    yield client
    client.close()


# Most tests send events dated November 2026 (fixed dates make the expected board
# ids readable) and expect the boards to apply them whatever the wall clock says. A
# lateness (and a dedupe window) of ten years past today keeps those windows open on
# any date; closing windows are tested on their own, with windows relative to now
# (tests/jobs/test_season.py, tests/api/test_closing_windows.py).
OPEN_DAYS = (datetime.now(UTC) - datetime(2026, 1, 1, tzinfo=UTC)).days + 3650
OPEN_LATENESS = f"P{OPEN_DAYS}D"
OPEN_WINDOWS_BOARDS = (
    (Path(__file__).resolve().parents[1] / "conf" / "boards.yaml")
    .read_text()
    .replace('allowedLateness: "PT1H"', f'allowedLateness: "{OPEN_LATENESS}"')
    .replace('windowLateness: "PT1H"', f'windowLateness: "{OPEN_LATENESS}"')
)


def settings_boards(directory: Path) -> Path:
    """The default boards with windows open whatever the date, as a file."""
    path = directory / "boards.yaml"
    path.write_text(OPEN_WINDOWS_BOARDS)
    return path


def open_windows_env(directory: Path) -> dict[str, str]:
    """Environment for an `lb` process that must apply events dated November 2026
    whatever the date: the open-windows boards file and a dedupe window as long."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "LB_BOARDS_FILE": str(settings_boards(directory)),
        "LB_DEDUPE_WINDOW": OPEN_LATENESS,
    }


@pytest.fixture
def settings(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Settings:
    boards_file = settings_boards(tmp_path)
    return Settings(
        redis_url=redis_url,
        data_dir=tmp_path / "lb",
        partitions=4,
        rate_limit="off",
        boards_file=boards_file,
        # Fixed event dates in tests (November 2026) must not age out of the window.
        dedupe_window=timedelta(days=OPEN_DAYS),
    )


class SignedClient:
    """A TestClient that signs every write like a trusted game server."""

    def __init__(
        self, client: TestClient, key_id: str = "dev", secret: bytes = DEV_SECRET
    ):
        self.client = client
        self.key_id = key_id
        self.secret = secret

    def post(self, path: str, payload: Any, **headers: str) -> Any:
        body = orjson.dumps(payload)
        signed = {
            "X-Key-Id": self.key_id,
            "X-Signature": sign(self.secret, body),
            "Content-Type": "application/json",
        }
        signed.update(headers)
        return self.client.post(path, content=body, headers=signed)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.client.get(path, **kwargs)


@pytest.fixture
def api(settings: Settings) -> Iterator[SignedClient]:
    with TestClient(create_app(settings)) as client:
        yield SignedClient(client)


def event(**overrides: Any) -> dict[str, Any]:
    """A valid score event (the seed scenario's E77) with fields overridden."""
    body: dict[str, Any] = {
        "eventId": "E77",
        "playerId": "P2",
        "matchId": "M91",
        "sourceRevision": 1,
        "occurredAt": "2026-11-20T10:00:00Z",
        "region": "eu",
        "result": {"points": 30},
        "kind": "result",
        "reason": None,
    }
    body.update(overrides)
    return body
