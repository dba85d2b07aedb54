"""`lb rebuild`: after the speed-layer keys are wiped (the log kept), the rebuild from
the newest generation, the landed Delta rows after its boundary and the unlanded Redis
log gives the same answers and the same Redis state as before; real Redis, Spark, Delta.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from cli.main import main as lb_main
from conf.settings import Settings
from jobs.land import run_land
from jobs.publish import run_publish
from jobs.rebuild import run_rebuild
from speed.partitions import partition_of
from speed.rebase import rebase_published
from speed.rebuild import RebuildRaced
from tests.conftest import BACKENDS, OPEN_LATENESS, SignedClient, event
from tests.support.rebuild import speed_keys, wipe_all_but_logs

pytestmark = pytest.mark.integration

# B5 is a best-of season: its rebuild needs the per-match best sets too.
BOARDS_YAML = """
regions: [eu, na]
seasons:
  - {id: S4, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN", aggregation: sum}
  - {id: B5, start: "2026-11-01T00:00:00Z", end: "2026-12-01T00:00:00Z",
     allowedLateness: "OPEN", aggregation: max}
""".replace("OPEN", OPEN_LATENESS)  # open whatever the date
BOARDS = ["season:S4:global", "season:B5:global", "alltime:all:eu", "season:S4:na"]
PLAYERS = [f"p{i}" for i in range(8)]


@pytest.fixture
def boards_settings(settings: Settings, tmp_path: Path) -> Settings:
    path = tmp_path / "boards.yaml"
    path.write_text(BOARDS_YAML)
    return settings.model_copy(update={"boards_file": path})


@pytest.fixture
def ops_api(boards_settings: Settings) -> Any:
    from fastapi.testclient import TestClient

    from api.main import create_app

    with TestClient(create_app(boards_settings)) as client:
        yield SignedClient(client)


def send(api: SignedClient, player: str, match: str, rev: int, points: int) -> Any:
    reply = api.post(
        "/v1/score-events",
        event(
            eventId=f"{player}-{match}-{rev}",
            playerId=player,
            matchId=match,
            sourceRevision=rev,
            region="eu" if int(player[1:]) % 2 == 0 else "na",
            result={"points": points},
            kind="correction" if rev > 1 else "result",
            reason="review" if rev > 1 else None,
        ),
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def answers(api: SignedClient) -> dict[str, Any]:
    """Every read the speed layer takes part in, for every board and player."""
    out: dict[str, Any] = {}
    for board in BOARDS:
        top = api.get(f"/v1/boards/{board}/top", params={"limit": 100}).json()
        out[f"top {board}"] = top
        for player in PLAYERS:
            for mode in ("live", "approx"):
                reply = api.get(
                    f"/v1/boards/{board}/players/{player}", params={"mode": mode}
                )
                out[f"{mode} {board} {player}"] = (reply.status_code, reply.json())
            reply = api.get(
                f"/v1/boards/{board}/players/{player}/nearby", params={"radius": 2}
            )
            out[f"nearby {board} {player}"] = (reply.status_code, reply.json())
    return out


def feed(api: SignedClient, round_: int) -> None:
    for i, player in enumerate(PLAYERS):
        send(api, player, f"m{round_}", 1, 10 * ((i + round_) % 4))
    send(api, "p1", f"m{round_}", 2, 3)  # a downward correction
    send(api, "p2", f"m{round_}", 1, 10 * ((2 + round_) % 4))  # a redelivery


@pytest.mark.parametrize("redis_backend", BACKENDS, indirect=True)
def test_rebuild_after_wipe_restores_identical_answers(
    ops_api: SignedClient,
    boards_settings: Settings,
    spark: Any,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, settings = ops_api, boards_settings
    feed(api, 1)
    generation = run_publish(settings, spark=spark)
    assert set(rebase_published(settings, generation).partitions.values()) == {"ok"}
    api.client.app.state.generations.refresh(force=True)
    feed(api, 2)
    # Landed after the generation's boundary: in Delta only, trimmed from the log.
    run_land(settings, spark)
    feed(api, 3)
    send(api, "p5", "m1", 2, 40)  # a correction of a match already in the generation
    # The premise: events after the boundary are both landed and still in the log.
    landed = {p: int(redis_client.get(f"lb:{{p{p}}}:landed") or 0) for p in range(4)}
    positions = {p: int(redis_client.get(f"lb:{{p{p}}}:pos") or 0) for p in range(4)}
    assert any(landed[p] > 0 for p in landed)
    assert any(positions[p] > landed[p] for p in positions)

    before = answers(api)
    keys_before = speed_keys(redis_client)
    assert before[f"live {BOARDS[0]} p5"][1]["basis"] == "live"

    # A rebuild of an intact speed layer finds nothing to change.
    intact = run_rebuild(settings, spark=spark, dry_run=True)
    assert intact.differences == [], [str(d) for d in intact.differences[:5]]
    # A per-block count of a changed-set bitmap that drifted from its bits is
    # named (speed/lua/lib/changed_counts.lua: the live counts read them).
    counted = sorted(redis_client.scan_iter(match="lb:*:chc:*"))
    assert counted, "the premise: players on the base changed since it"
    saved = redis_client.get(counted[0])
    redis_client.execute_command("BITFIELD", counted[0], "INCRBY", "u32", "#0", 1)
    drift = run_rebuild(settings, spark=spark, dry_run=True)
    assert [d.what for d in drift.differences] == [
        "changed-set snapshot counts per block"
    ]
    redis_client.set(counted[0], saved)

    wipe_all_but_logs(redis_client)
    # The command line: `lb rebuild --dry-run` prints the diff and changes nothing.
    monkeypatch.setenv("LB_REDIS_URL", settings.redis_url or "")
    monkeypatch.setenv("LB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("LB_PARTITIONS", str(settings.partitions))
    monkeypatch.setenv("LB_BOARDS_FILE", str(settings.boards_file))
    assert lb_main(["rebuild", "--dry-run"]) == 0
    printed = capsys.readouterr()
    assert "total|version: live None -> rebuilt" in printed.out
    assert "differences; nothing changed" in printed.out
    assert "partition 4/4" in printed.err
    dry = run_rebuild(settings, spark=spark, dry_run=True)
    assert dry.differences and set(dry.partitions.values()) == {"dry-run"}
    assert speed_keys(redis_client) == {}  # the dry run changed nothing
    whats = {d.what for d in dry.differences}
    assert {"total|version", "histogram counts", "position"} <= whats

    lines: list[str] = []
    done = run_rebuild(settings, spark=spark, progress=lines.append)
    assert set(done.partitions.values()) == {"ok"}
    assert done.records_restored > 0
    assert any("partition 4/4" in line for line in lines)
    assert speed_keys(redis_client) == keys_before
    assert answers(api) == before

    # Redeliveries stay duplicates, corrections apply their delta once.
    again = send(api, "p3", "m3", 1, 10 * ((3 + 3) % 4))
    assert again["status"] == "duplicate"
    corrected = send(api, "p3", "m3", 2, 0)
    s4 = next(b for b in corrected["boards"] if b["board"] == BOARDS[0])
    live = before[f"live {BOARDS[0]} p3"][1]
    assert s4["total"] == live["score"] - 10 * ((3 + 3) % 4)


def test_rebuild_retries_a_partition_that_received_events(
    ops_api: SignedClient,
    boards_settings: Settings,
    spark: Any,
    redis_client: redis.Redis,
) -> None:
    api, settings = ops_api, boards_settings
    feed(api, 1)
    raced: list[int] = []

    def race(partition: int) -> None:
        # One event lands on the partition between its build and its switch, once.
        if not raced:
            for player in PLAYERS:
                if partition_of(player, settings.partitions) == partition:
                    raced.append(partition)
                    send(api, player, "late-arrival", 1, 7)
                    return

    report = run_rebuild(settings, spark=spark, before_switch=race)
    assert raced and set(report.partitions.values()) == {"ok"}
    # The racing event is in the rebuilt state: a second dry run finds nothing.
    assert run_rebuild(settings, spark=spark, dry_run=True).differences == []

    def always(partition: int) -> None:
        send(api, "p0", f"storm-{len(raced)}", 1, 1)
        raced.append(partition)

    with pytest.raises(RebuildRaced):
        run_rebuild(settings, spark=spark, before_switch=always)
