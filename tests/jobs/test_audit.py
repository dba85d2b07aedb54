"""The audit trail: durable in Redis at once, landed into Delta exactly once."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import redis
import redis.asyncio as aioredis
from pyspark.sql import SparkSession

from conf.settings import Settings
from jobs.audit import audit_path, land_audit, stream_id, stream_key
from speed.audit import AUDIT_STREAM, record_audit, record_audit_sync

pytestmark = pytest.mark.integration


@pytest.mark.unit
def test_stream_key_round_trip() -> None:
    for entry in ("0-0", "1764460800123-0", "1764460800123-7", "5-1048575"):
        assert stream_id(stream_key(entry)) == entry
    assert stream_key("5-1") > stream_key("5-0") > stream_key("4-1048575")


def test_audit_lands_once_and_trims_after_commit(
    settings: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    first = record_audit_sync(
        redis_client,
        "ops1",
        "adjudication",
        "season:S4",
        "late match",
        {"accept": ["E1"], "reject": []},
    )

    async def from_api() -> str:
        client = aioredis.from_url(settings.redis_url or "")
        try:
            return await record_audit(
                client, "ops2", "flag.shadow", "P9", "cheating", None
            )
        finally:
            await client.aclose()

    second = asyncio.run(from_api())
    assert stream_key(second) > stream_key(first)
    assert land_audit(settings, spark, redis_client) == 2
    # Landed and trimmed: a rerun finds nothing new.
    assert redis_client.xlen(AUDIT_STREAM) == 0
    assert land_audit(settings, spark, redis_client) == 0
    third = record_audit_sync(redis_client, "ops1", "rule.promote", "S4", "v2", {})
    assert land_audit(settings, spark, redis_client) == 1

    rows = (
        spark.read.format("delta")
        .load(str(audit_path(settings)))
        .orderBy("audit_key")
        .collect()
    )
    assert [r["audit_id"] for r in rows] == [first, second, third]
    assert [(r["actor"], r["action"], r["subject"], r["reason"]) for r in rows] == [
        ("ops1", "adjudication", "season:S4", "late match"),
        ("ops2", "flag.shadow", "P9", "cheating"),
        ("ops1", "rule.promote", "S4", "v2"),
    ]
    assert orjson.loads(rows[0]["details"]) == {"accept": ["E1"], "reject": []}


class _CrashBeforeTrim(redis.Redis):
    """A client that dies right after the Delta commit, before trimming."""

    def xtrim(self, *args: object, **kwargs: object) -> int:  # type: ignore[override]
        raise ConnectionError("crash between the Delta commit and the trim")


def test_audit_crash_before_trim_lands_nothing_twice(
    settings: Settings, redis_client: redis.Redis, spark: SparkSession
) -> None:
    for i in range(3):
        record_audit_sync(redis_client, "ops1", "flag.shadow", f"P{i}", "r", {})
    crashing = _CrashBeforeTrim.from_url(settings.redis_url or "")
    with pytest.raises(ConnectionError):
        land_audit(settings, spark, crashing)
    crashing.close()
    assert redis_client.xlen(AUDIT_STREAM) == 3  # committed, not trimmed
    record_audit_sync(redis_client, "ops1", "flag.restore", "P0", "r", {})
    assert land_audit(settings, spark, redis_client) == 1
    assert redis_client.xlen(AUDIT_STREAM) == 0
    rows = spark.read.format("delta").load(str(audit_path(settings))).collect()
    assert sorted(r["subject"] for r in rows) == ["P0", "P0", "P1", "P2"]
    assert len({r["audit_id"] for r in rows}) == 4
