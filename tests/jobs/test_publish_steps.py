"""The publish steps of the Airflow DAG publish the same generation as run_publish,
and refuse to race a publish that happened between two steps (real Redis, Spark,
Delta)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conf.settings import Settings
from jobs.publish import run_publish
from jobs.publish_lock import PublishBusy, publish_lock
from jobs.publish_steps import (
    GenerationTaken,
    land_step,
    publish_step,
    rebase_step,
    recompute_step,
)
from tests.conftest import SignedClient, event

pytestmark = pytest.mark.integration


def test_steps_publish_what_run_publish_publishes(
    api: SignedClient, settings: Settings, spark: Any
) -> None:
    for i in range(9):
        reply = api.post(
            "/v1/score-events",
            event(eventId=f"S{i}", playerId=f"s{i}", result={"points": 7 * (i % 4)}),
        )
        assert reply.status_code == 200
    landed = land_step(settings, spark)
    boundary = landed["boundary"]
    assert sum(boundary.values()) == 9 and set(boundary) == {"0", "1", "2", "3"}
    assert landed["landingStartedAt"]
    generation = recompute_step(settings, landed, spark)
    assert generation == "g1"
    assert publish_step(settings, generation, landed, spark) == "g1"
    manifest = (settings.segments_dir / "g1" / "manifest.json").read_text()
    assert '"landingStartedAt"' in manifest
    assert set(rebase_step(settings, "g1").values()) == {"ok"}

    # Same bronze, same boundary: run_publish's g2 has byte-identical segments.
    assert run_publish(settings, spark=spark, land=False) == "g2"
    g1, g2 = settings.segments_dir / "g1", settings.segments_dir / "g2"
    # The segments, not the landed records index: its layers are named after the
    # generation that wrote them (g2 links g1's and adds its own, empty one).
    names = sorted(p.name for p in g1.iterdir() if _segment_file(p))
    assert names and names == sorted(p.name for p in g2.iterdir() if _segment_file(p))
    for name in names:
        assert (g1 / name).read_bytes() == (g2 / name).read_bytes(), name

    # A publish between recompute and publish: the step refuses, nothing is hidden.
    g3 = recompute_step(settings, landed, spark)
    assert g3 == "g3"
    assert run_publish(settings, spark=spark, land=False) == "g3"
    with pytest.raises(GenerationTaken):
        publish_step(settings, g3, landed, spark)

    with publish_lock(settings), pytest.raises(PublishBusy):
        land_step(settings, spark)


def _segment_file(path: Path) -> bool:
    return path.suffix == ".arrow" and not path.name.startswith("landed.")
