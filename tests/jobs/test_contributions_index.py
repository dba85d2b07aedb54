"""The contributions index the publish job writes (jobs/record_indexes.py) against
the bronze table it was derived from: events through the API (results, a
correction, a redelivery, a second correction), three publishes, and for every
generation, board and player the index answers what the old history read derived
from bronze (tests/serving/test_contributions.py ``bronze_events``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from conf.settings import Settings
from jobs import spark as spark_module
from jobs.land import bronze_path
from jobs.publish import run_publish
from serving.contributions import load
from speed.partitions import partition_of
from tests.conftest import SignedClient, event
from tests.serving.test_contributions import bronze_events

pytestmark = pytest.mark.integration


def post(api: SignedClient, **fields: Any) -> str:
    reply = api.post("/v1/score-events", event(**fields))
    assert reply.status_code == 200, reply.text
    return str(reply.json()["status"])


def test_the_published_index_answers_what_bronze_answers(
    spark: Any,
    settings: Settings,
    api: SignedClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bronze rows come to the driver in several ranges of log positions, as
    # for a large publish (one here would hold them all).
    monkeypatch.setattr(spark_module, "ROWS_PER_FETCH", 1)
    for i, (player, points) in enumerate([("P1", 920), ("P2", 900), ("P3", 10)]):
        post(api, eventId=f"E{i}", playerId=player, matchId=f"M{i}",
             result={"points": points})  # fmt: skip
    assert run_publish(settings, spark=spark) == "g1"
    # g2: a correction, a redelivery of E1 (a duplicate: nothing applied), more.
    assert post(api, eventId="E9", playerId="P1", matchId="M0", sourceRevision=2,
                result={"points": 870}, kind="correction",
                reason="recount") == "accepted"  # fmt: skip
    assert post(api, eventId="E1", playerId="P2", matchId="M1",
                result={"points": 900}) == "duplicate"  # fmt: skip
    post(api, eventId="E10", playerId="P2", matchId="M10", result={"points": 5})
    assert run_publish(settings, spark=spark) == "g2"
    # g3: one more correction of the same match and a new player.
    post(api, eventId="E11", playerId="P1", matchId="M0", sourceRevision=3,
         result={"points": 880}, kind="correction", reason="again")  # fmt: skip
    post(api, eventId="E12", playerId="P4", matchId="M12", result={"points": 1})
    assert run_publish(settings, spark=spark) == "g3"

    rows = [
        r.asDict()
        for r in spark.read.format("delta")
        .load(str(bronze_path(settings)))
        .select("partition", "position", "player_id", "raw")
        .collect()
    ]
    listed = 0
    for number in (1, 2, 3):
        directory = settings.segments_dir / f"g{number}"
        manifest = orjson.loads((directory / "manifest.json").read_bytes())
        index = load(directory, manifest)
        assert index is not None, manifest
        boards = set(manifest["boards"])
        assert boards
        for board in boards:
            for player in ("P1", "P2", "P3", "P4"):
                partition = partition_of(player, settings.partitions)
                through = int(manifest["boundary"][str(partition)])
                got = index.contributions(board, player, partition, through)
                assert got == bronze_events(rows, board, player, partition, through)
                listed += len(got)
    # P1's two corrections on the season board: each moves the total by the
    # difference from the match's previous points.
    g3 = settings.segments_dir / "g3"
    index = load(g3, orjson.loads((g3 / "manifest.json").read_bytes()))
    assert index is not None
    p1 = partition_of("P1", settings.partitions)
    deltas = [
        (body["eventId"], body["kind"], body["delta"])
        for _, body in index.contributions("season:S4:global", "P1", p1, 10**9)
    ]
    assert deltas == [
        ("E0", "result", 920),
        ("E9", "correction", -50),
        ("E11", "correction", 10),
    ]
    assert listed > 0
