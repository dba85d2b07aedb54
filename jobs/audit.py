"""Land the audit stream (``speed/audit.py``) into the Delta table ``gold_audit``.

Like the partition logs: the start is Delta's last landed stream id (Delta is the
truth), the append is idempotent (``txnAppId = audit``, ``txnVersion`` = the batch's
last stream id as ``ms << 20 | seq``), and the stream is trimmed only up to what Delta
committed. A crash anywhere lands nothing twice and loses nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson
import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.settings import Settings
from jobs.land import table_exists, trim_stream
from speed.audit import AUDIT_STREAM, decode_entry
from speed.connection import sync_client
from speed.server import resolve_redis_url

GOLD_AUDIT = "gold_audit"
SEQ_BITS = 20
BATCH = 10_000

AUDIT_SCHEMA = T.StructType(
    [
        T.StructField("audit_id", T.StringType(), False),
        T.StructField("audit_key", T.LongType(), False),
        T.StructField("at", T.TimestampType(), False),
        T.StructField("actor", T.StringType(), False),
        T.StructField("action", T.StringType(), False),
        T.StructField("subject", T.StringType(), True),
        T.StructField("reason", T.StringType(), True),
        T.StructField("details", T.StringType(), False),
    ]
)


def audit_path(settings: Settings) -> Path:
    return settings.delta_dir / GOLD_AUDIT


def stream_key(entry_id: str) -> int:
    """A stream id ``<ms>-<seq>`` as one increasing integer (``ms << 20 | seq``)."""
    ms, _, seq = entry_id.partition("-")
    return (int(ms) << SEQ_BITS) | int(seq or 0)


def stream_id(key: int) -> str:
    return f"{key >> SEQ_BITS}-{key & ((1 << SEQ_BITS) - 1)}"


def extract_landed_key(spark: SparkSession, path: Path) -> int:
    if not table_exists(path):
        return 0
    row = spark.read.format("delta").load(str(path)).agg(F.max("audit_key")).first()
    return int(row[0]) if row and row[0] is not None else 0


def transform_audit_rows(
    spark: SparkSession, entries: list[tuple[str, bytes]]
) -> DataFrame:
    rows = []
    for entry_id, raw in entries:
        data = decode_entry(raw)
        rows.append(
            (
                entry_id,
                stream_key(entry_id),
                datetime.fromtimestamp(int(data["atMs"]) / 1000, UTC),
                str(data["actor"]),
                str(data["action"]),
                data.get("subject"),
                data.get("reason"),
                orjson.dumps(
                    data.get("details") or {}, option=orjson.OPT_SORT_KEYS
                ).decode(),
            )
        )
    return spark.createDataFrame(rows, AUDIT_SCHEMA)


def land_audit(
    settings: Settings,
    spark: SparkSession,
    client: redis.Redis | None = None,
) -> int:
    """Land every audit entry not yet in Delta; returns how many were appended."""
    path = audit_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    own = client is None
    if client is None:
        client = sync_client(resolve_redis_url(settings))
    try:
        landed = extract_landed_key(spark, path)
        total = 0
        while True:
            start = f"({stream_id(landed)}" if landed else "-"
            raw: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
                AUDIT_STREAM, min=start, max="+", count=BATCH
            )
            if not raw:
                break
            entries = [(i.decode(), fields[b"r"]) for i, fields in raw]
            last = stream_key(entries[-1][0])
            (
                transform_audit_rows(spark, entries)
                .write.format("delta")
                .mode("append")
                .option("txnAppId", "audit")
                .option("txnVersion", last)
                .save(str(path))
            )
            total += len(entries)
            landed = last
            # Trim only what Delta committed: MINID keeps ids >= the next one
            # (exactly: an approximate trim leaves whole nodes behind).
            trim_stream(client, AUDIT_STREAM, stream_id(last + 1))
        return total
    finally:
        if own:
            client.close()
