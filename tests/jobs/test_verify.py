"""`lb verify`: agrees on an honest service, finds planted divergences in the live
layer and in a served snapshot, names them, exits 1, writes a Delta row per run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
import redis

from api.served import served_reads
from cli.main import main as lb_main
from conf.settings import Settings
from jobs.publish import run_publish
from jobs.verify import VERIFY_RUNS, run_verify
from serving.verify_state import read_last_verify
from speed.partitions import Keys, encode_entry, partition_of
from speed.rebase import rebase_published
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration
BOARD = "season:S4:global"


def send(api: SignedClient, player: str, match: str, points: int, rev: int = 1) -> None:
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=f"{player}-{match}-{rev}",
            playerId=player,
            matchId=match,
            sourceRevision=rev,
            result={"points": points},
            kind="correction" if rev > 1 else "result",
            reason="fix" if rev > 1 else None,
        ),
    )
    assert reply.status_code == 200, reply.text


def test_verify_agrees_then_names_planted_divergences(
    api: SignedClient,
    settings: Settings,
    spark: Any,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(12):
        send(api, f"v{i}", "m1", 10 * (i % 5))
    generation = run_publish(settings, spark=spark)
    rebase_published(settings, generation)
    send(api, "v3", "m2", 100)  # live only: after the generation's boundary
    send(api, "v4", "m1", 0, rev=2)  # a downward correction, live only

    with served_reads(settings) as served:
        honest = run_verify(settings, served, spark=spark, sample=5, seed=1)
    assert honest.divergences == [], honest.divergences
    assert honest.live_as_of is not None and honest.generation == generation
    # top 12 + 0 sampled beyond the top, snapshot and live, for every board
    assert honest.checked >= 2 * len(honest.boards)
    assert read_last_verify(settings)["divergenceCount"] == 0  # type: ignore[index]

    # Plant a live divergence: a player the log never saw, in a changed-set.
    keys = Keys(partition_of("ghost", settings.partitions))
    redis_client.zadd(keys.changed_live(BOARD), {encode_entry(500, "ghost"): 0})
    monkeypatch.setenv("LB_REDIS_URL", settings.redis_url or "")
    monkeypatch.setenv("LB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("LB_PARTITIONS", str(settings.partitions))
    monkeypatch.setenv("LB_RATE_LIMIT", "off")
    # The test's boards (windows open on any date): with the default file the
    # November season is closed after 1 December and verify reads it as a snapshot.
    monkeypatch.setenv("LB_BOARDS_FILE", str(settings.boards_file))
    code = lb_main(["verify", "--board", BOARD, "--sample", "3", "--seed", "2"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"DIVERGENCE live {BOARD} top position 1: served ghost" in out
    assert f"DIVERGENCE live {BOARD}: population" in out
    assert "DIVERGENCE snapshot" not in out
    redis_client.zrem(keys.changed_live(BOARD), encode_entry(500, "ghost"))

    # Plant a snapshot divergence: one served score changed in the segment file.
    segment = Path(settings.segments_dir) / generation / f"{BOARD}.arrow"
    with pa.memory_map(str(segment)) as source:
        table = ipc.open_file(source).read_all()
    scores = table.column("score").to_pylist()
    scores[-1] += 1  # the last row: display order is kept, only the score is wrong
    column = table.schema.get_field_index("score")
    planted = table.set_column(
        column, table.schema.field(column), pa.array(scores, pa.int64())
    )
    tmp = segment.with_suffix(".tmp")
    with pa.OSFile(str(tmp), "wb") as sink, ipc.new_file(sink, planted.schema) as w:
        w.write_table(planted)
    os.replace(tmp, segment)
    last_player = table.column("player_id")[-1].as_py()
    with served_reads(settings) as served:
        result = run_verify(
            settings, served, spark=spark, board=BOARD, sample=3, seed=3
        )
    assert not result.ok
    assert any(
        d.startswith(
            f"snapshot {generation} {BOARD} top position 12: served {last_player}"
        )
        for d in result.divergences
    ), result.divergences
    assert read_last_verify(settings)["divergenceCount"] == len(result.divergences)  # type: ignore[index]

    runs = spark.read.format("delta").load(str(settings.delta_dir / VERIFY_RUNS))
    rows = sorted(runs.collect(), key=lambda r: r["started_at"])
    assert [r["ok"] for r in rows] == [True, False, False]
    assert rows[1]["divergence_count"] >= 2
    assert any("ghost" in d for d in rows[1]["divergences"])
