"""A log tail written before result items (objects under ``result.boards``, with
copies of the record's ids: serving/log_records.py) rebases as the same tail in
today's form: the players it changed stay live (the rebase script reads the tail
in Lua; tests/serving/test_log_records.py reads both forms in Python). Both runs on
real Redis, a generation written without Spark. It fails when the script reads no
item of an older record (checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from serving.log_records import logged_result
from speed.connection import sync_client
from speed.partitions import Keys
from speed.rebase import rebase_published
from speed.server import RedisServer
from tests.conftest import SignedClient, event
from tests.support.redis_servers import own_server
from tests.support.segments import write_generation
from tests.support.settings import base_settings

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"
BASE = {"a": 30, "b": 20, "c": 20, "d": 5}


def to_older_form(url: str, partitions: int) -> int:
    """Rewrite every log entry's result as records were written before items."""
    client = sync_client(url)
    rewritten = 0
    try:
        for partition in range(partitions):
            key = Keys(partition).log
            entries = client.xrange(key)
            client.delete(key)
            for entry_id, fields in entries:  # type: ignore[union-attr]
                record = orjson.loads(fields[b"r"])
                assert "items" in record["result"], record
                record["result"] = logged_result(record)
                client.xadd(key, {"r": orjson.dumps(record)}, id=entry_id)
                rewritten += 1
    finally:
        client.close()
    return rewritten


def rebased_top(server: RedisServer, directory: Path, older: bool) -> list[Any]:
    directory.mkdir()
    settings = base_settings(server.url, directory)
    versions = {BOARD: dict.fromkeys(BASE, 1)}
    write_generation(settings.segments_dir, 1, {BOARD: BASE}, versions=versions)
    rebase_published(settings, "g1")
    with TestClient(create_app(settings)) as client:
        api = SignedClient(client)
        for player, points in (("b", 15), ("n", 25)):
            reply = api.post(
                "/v1/score-events",
                event(
                    eventId=f"{player}1",
                    playerId=player,
                    matchId=f"{player}1",
                    result={"points": points},
                ),  # fmt: skip
            )
            assert reply.status_code == 200, reply.text
    if older:
        assert to_older_form(server.url, settings.partitions) == 2
    # g2 has the same rows and boundary 0: both events are the tail after it.
    write_generation(settings.segments_dir, 2, {BOARD: BASE}, versions=versions)
    report = rebase_published(settings, "g2")
    assert set(report.partitions.values()) == {"ok"}, report
    with TestClient(create_app(settings)) as client:
        top = SignedClient(client).get(f"/v1/boards/{BOARD}/top").json()
    assert top["basis"] == "live", top
    return [(e["playerId"], e["score"], e["rank"]) for e in top["entries"]]


def test_an_older_log_tail_rebases_as_todays(tmp_path: Path) -> None:
    server = own_server(tmp_path / "redis")
    try:
        today = rebased_top(server, tmp_path / "today", older=False)
        sync_client(server.url).flushall()
        older = rebased_top(server, tmp_path / "older", older=True)
    finally:
        server.stop()
    want = [("b", 35, 1), ("a", 30, 2), ("n", 25, 3), ("c", 20, 4), ("d", 5, 5)]
    assert today == want
    assert older == want
