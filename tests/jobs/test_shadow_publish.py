"""Shadow removal across publishes: the next generation leaves the player out of every
public snapshot answer (its own read, with its token, answers as if present), a
restore brings it back live at once and in the generation after."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from api.tokens import issue_player_token
from conf.settings import Settings
from jobs.publish import run_publish
from speed.rebase import rebase_published
from tests.conftest import SignedClient
from tests.support.shadow import (
    BOARD,
    SEED,
    expected_top,
    flag,
    public_answers,
    seed,
)

pytestmark = pytest.mark.integration
SNAP = {"mode": "snapshot"}


def snapshot_top(api: SignedClient) -> dict[str, object]:
    return api.get(f"/v1/boards/{BOARD}/top", params=SNAP).json()


def test_shadow_through_generations(
    spark: SparkSession, settings: Settings, api: SignedClient
) -> None:
    seed(api, SEED)
    assert flag(api, "P1", "shadow").status_code == 200
    visible = {p: s for p, s in SEED.items() if p != "P1"}

    generation = run_publish(settings, spark=spark, bucket_target=2)
    assert set(rebase_published(settings, generation).partitions.values()) == {"ok"}
    top = snapshot_top(api)
    assert top["entries"] == expected_top(visible)
    assert top["population"] == 4
    entries = api.get(f"/v1/boards/{BOARD}/entries", params={"limit": 10}).json()
    assert [e["playerId"] for e in entries["entries"]] == ["P2", "P3", "P4", "P5"]
    near = api.get(f"/v1/boards/{BOARD}/players/P2/nearby", params=SNAP).json()
    assert "P1" not in [e["playerId"] for e in near["entries"]]
    other = api.get(f"/v1/boards/{BOARD}/players/P2", params=SNAP).json()
    assert (other["rank"], other["population"]) == (1, 4)
    token = issue_player_token(settings.player_token_secret, "P1")
    own = api.get(
        f"/v1/boards/{BOARD}/players/P1",
        params=SNAP,
        headers={"Authorization": f"Bearer {token}"},
    ).json()
    assert (own["score"], own["rank"], own["position"], own["population"]) == (
        920,
        1,
        1,
        5,
    )
    # Live answers on the new base agree.
    public_answers(api, visible)

    # Restore: live at once (the generation does not hold P1), snapshots next time.
    assert flag(api, "P1", "restore").json()["changed"] is True
    public_answers(api, SEED)
    assert snapshot_top(api)["population"] == 4
    generation = run_publish(settings, spark=spark, bucket_target=2)
    assert set(rebase_published(settings, generation).partitions.values()) == {"ok"}
    top = snapshot_top(api)
    assert top["entries"] == expected_top(SEED)
    public_answers(api, SEED)
