"""Land the speed layer's partition logs into the Delta bronze table.

Read the last landed position of every partition from Delta (not from Redis: Delta
is the truth, Redis' ``landed`` key is a copy), read each log after it, append what
the partitions hold in one Delta commit (several when their records pass
LAND_COMMIT_BYTES) with an idempotent write (``txnAppId = land``, ``txnVersion`` =
the landed positions summed over every partition after the commit), then set
``landed`` and trim each log up to its committed position only.

A crash between the Delta commit and the trim re-reads the same entries next time,
but the start positions come from Delta, so they are skipped; a blind retry of the
same batch is dropped by Delta's transaction check. Nothing is landed twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from conf.boards import DEFAULT_GAME
from conf.settings import Settings
from jobs.spark import rows_in_order
from speed.connection import sync_client
from speed.late_review import late_review_key, queue_late_records
from speed.partitions import Keys
from speed.server import resolve_redis_url

BRONZE = "bronze_events"
XRANGE_COUNT = 10_000
# Entries one approximate XTRIM may remove: each call holds Redis for a few ms at
# most (about 3 ms per 10,000 entries), where one exact trim of a large log would
# block every write for the whole removal (about 65 ms per million entries).
TRIM_STEP = 10_000

RECORD_SCHEMA = T.StructType(
    [
        T.StructField("partition", T.IntegerType()),
        T.StructField("position", T.LongType()),
        T.StructField("receivedAtMs", T.LongType()),
        T.StructField("status", T.StringType()),
        T.StructField(
            "event",
            T.StructType(
                [
                    T.StructField("eventId", T.StringType()),
                    T.StructField("playerId", T.StringType()),
                    T.StructField("matchId", T.StringType()),
                    T.StructField("sourceRevision", T.LongType()),
                    T.StructField("occurredAt", T.StringType()),
                    T.StructField("region", T.StringType()),
                    T.StructField("points", T.LongType()),
                    T.StructField("placement", T.LongType()),
                    T.StructField("kills", T.LongType()),
                    T.StructField("durationSeconds", T.LongType()),
                    T.StructField("kind", T.StringType()),
                    T.StructField("reason", T.StringType()),
                    T.StructField("scores", T.MapType(T.StringType(), T.LongType())),
                    # Logged only for a game other than default (API.md "Games").
                    T.StructField("game", T.StringType()),
                ]
            ),
        ),
    ]
)


class LandingGap(RuntimeError):
    """The log does not continue where Delta stops: entries were lost or skipped."""


@dataclass(frozen=True, slots=True)
class Landed:
    partition: int
    through: int  # last position committed to Delta (0 when none)
    rows: int  # rows appended by this run


def bronze_path(settings: Settings) -> Path:
    return settings.delta_dir / BRONZE


def table_exists(path: Path) -> bool:
    """A Delta table with at least one commit: a writer killed during its first
    commit leaves ``_delta_log/`` without one (no table yet; writing creates it)."""
    from jobs.table_versions import table_version

    return table_version(path) is not None


def log_rows_in_order(
    rows: DataFrame,
    after: Mapping[int, int],
    through: Mapping[int, int],
    scratch: Path,
) -> Iterator[dict[str, Any]]:
    """``rows`` (bronze rows between the boundaries ``after`` and ``through``, with
    ``partition`` and ``position``) in the driver, in log order, as dicts: sorted
    runs written by the executors and read back (jobs/spark.py
    :func:`rows_in_order`); positions are dense, so the boundaries give each
    partition's span."""
    spans = [
        (partition, int(after.get(partition, 0)) + 1, final)
        for partition, final in sorted((int(p), int(v)) for p, v in through.items())
    ]
    return rows_in_order(rows, "partition", "position", spans, scratch)


# The idempotent landing commits' Delta transaction id. Tables landed before one
# commit covered every partition also hold ``land-p<N>`` transactions (one commit
# per partition); the landed-through positions come from the files' statistics
# either way (landed_through_from_log).
TXN_APP_ID = "land"
# Records one landing commit holds at most (their JSON bytes): partitions are landed
# together, a commit each time this is passed, so the driver holds about this much
# of the logs at once, and a publish makes one commit, not one per partition.
LAND_COMMIT_BYTES = 256 * 2**20


def landed_through_from_log(path: Path) -> dict[int, int] | None:
    """The landed-through position per partition: the largest ``position`` of each
    partition's live data files, from the statistics Delta keeps in its log (the
    checkpoint, then the JSON commits after it), without reading any data file.
    Bronze is only ever appended to (and compacted), so that is the last landed
    position.

    None when the log has no data file, a live file has no ``position`` statistic,
    or the log is laid out in a way this does not read (then the caller scans).
    """
    log_dir = path / "_delta_log"
    # Live data file -> (partition, its largest position); None: a file of no rows.
    live: dict[str, tuple[int, int] | None] = {}

    def add(action: Mapping[str, Any]) -> bool:
        stats = json.loads(action.get("stats") or "{}")
        if stats.get("numRecords") == 0:
            live[action["path"]] = None
            return True
        largest = (stats.get("maxValues") or {}).get("position")
        # A checkpoint's map column reads as (key, value) pairs, a commit's as a dict.
        values = dict(action.get("partitionValues") or {})
        if largest is None or values.get("partition") is None:
            return False  # no statistic: only a scan can tell
        live[action["path"]] = (int(values["partition"]), int(largest))
        return True

    try:
        if not log_dir.is_dir():
            return None
        after = -1
        pointer = log_dir / "_last_checkpoint"
        if pointer.exists():
            last = json.loads(pointer.read_text())
            if last.get("parts") or last.get("v2Checkpoint"):
                return None  # multi-part / v2 checkpoints: not read here
            after = int(last["version"])
            checkpoint = log_dir / f"{after:020d}.checkpoint.parquet"
            adds = pq.read_table(checkpoint, columns=["add"]).column("add")
            for item in adds.to_pylist():
                if item and not add(item):
                    return None
        for commit in sorted(log_dir.glob("*.json")):
            if not commit.stem.isdigit() or int(commit.stem) <= after:
                continue
            for line in commit.read_bytes().splitlines():
                action = json.loads(line)
                if "add" in action:
                    if not add(action["add"]):
                        return None
                elif "remove" in action:
                    live.pop(action["remove"]["path"], None)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None
    found: dict[int, int] = {}
    for entry in live.values():
        if entry is not None:
            partition, largest = entry
            found[partition] = max(found.get(partition, 0), largest)
    return found or None


def extract_landed_through(spark: SparkSession, path: Path) -> dict[int, int]:
    """Max landed position per partition according to Delta: the landing
    transactions recorded in the log, or a scan of (partition, position) when the
    table was not written by :func:`load_bronze`."""
    if not table_exists(path):
        return {}
    from_log = landed_through_from_log(path)
    if from_log is not None:
        return from_log
    rows = (
        spark.read.format("delta")
        .load(str(path))
        .groupBy("partition")
        .agg(F.max("position").alias("through"))
        .collect()
    )
    return {int(r["partition"]): int(r["through"]) for r in rows}


def transform_records(raw: DataFrame) -> DataFrame:
    """Log records (one JSON text per row, column ``value``) -> bronze rows."""
    rec = F.from_json(F.col("value"), RECORD_SCHEMA)
    return raw.select(rec.alias("r"), F.col("value").alias("raw")).select(
        F.col("r.partition").cast("int").alias("partition"),
        F.col("r.position").alias("position"),
        F.timestamp_millis(F.col("r.receivedAtMs")).alias("received_at"),
        F.col("r.receivedAtMs").alias("received_at_ms"),
        F.col("r.status").alias("status"),
        F.col("r.event.eventId").alias("event_id"),
        F.col("r.event.playerId").alias("player_id"),
        F.col("r.event.matchId").alias("match_id"),
        F.col("r.event.sourceRevision").alias("source_revision"),
        F.col("r.event.occurredAt").cast("timestamp").alias("occurred_at"),
        F.col("r.event.region").alias("region"),
        F.col("r.event.points").alias("points"),
        F.col("r.event.placement").alias("placement"),
        F.col("r.event.kills").alias("kills"),
        F.col("r.event.durationSeconds").alias("duration_seconds"),
        F.col("r.event.kind").alias("kind"),
        F.col("r.event.reason").alias("reason"),
        F.col("r.event.scores").alias("scores"),
        F.coalesce(F.col("r.event.game"), F.lit(DEFAULT_GAME)).alias("game"),
        "raw",
    )


def _position(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


def extract_log(
    client: redis.Redis, partition: int, after: int
) -> tuple[int, int, list[bytes]]:
    """Log entries after position ``after``: (first, last, records as JSON bytes).

    Returns (0, after, []) when there are none.
    :raises LandingGap: when positions are not consecutive from ``after + 1``.
    """
    key = Keys(partition).log
    expected = after + 1
    first = 0
    records: list[bytes] = []
    start = f"{after + 1}-0"
    while True:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
            key, min=start, max="+", count=XRANGE_COUNT
        )
        if not entries:
            break
        for entry_id, fields in entries:
            position = _position(entry_id)
            if position != expected:
                raise LandingGap(
                    f"partition {partition}: expected position {expected}, "
                    f"log has {position}"
                )
            first = first or position
            records.append(fields[b"r"])
            expected += 1
        # "(" makes the next range exclusive of the last entry read.
        start = f"({expected - 1}-0"
    last = expected - 1
    handed_out = int(client.get(Keys(partition).position) or 0)
    if first == 0 and handed_out > after:
        raise LandingGap(
            f"partition {partition}: positions up to {handed_out} handed out but the "
            f"log holds nothing after {after} (trimmed before landing?)"
        )
    return first, last, records


def records_frame(spark: SparkSession, records: list[bytes]) -> DataFrame:
    """The log records as a one-column (``value``) DataFrame, handed to Spark as an
    in-memory Arrow table: no temp file, so executors on other hosts need no access
    to the driver's disk."""
    table = pa.table({"value": pa.array([r.decode() for r in records], pa.string())})
    return spark.createDataFrame(table)


def load_bronze(batch: DataFrame, path: Path, version: int) -> None:
    """Idempotent append: Delta skips a (``land``, version) it has already seen.
    ``version``: every partition's landed-through position after this commit,
    summed (it grows with every record landed, so a later commit never repeats it)."""
    (
        batch.write.format("delta")
        .mode("append")
        .partitionBy("partition")
        # Tables landed before the match-record columns existed gain them.
        .option("mergeSchema", "true")
        .option("txnAppId", TXN_APP_ID)
        .option("txnVersion", version)
        .save(str(path))
    )


def queue_late_reviews(client: redis.Redis, records: list[bytes]) -> None:
    """Copy the season late-review records of an extracted batch to their queues."""
    queued = queue_late_records(records)
    for season_id, found in queued.items():
        client.hset(late_review_key(season_id), mapping=found)  # type: ignore[arg-type]


def trim_stream(client: redis.Redis, key: str, minid: str) -> int:
    """Remove every entry of stream ``key`` with an id below ``minid``; returns how
    many were removed.

    A bare ``XTRIM MINID`` (redis-py's default, approximate) removes whole nodes
    only and at most 10,000 entries per call, so it leaves landed entries behind.
    Whole nodes go in bounded approximate steps (``LIMIT``), then one exact trim
    removes the rest (at most part of one node): the result is exact and no call
    blocks Redis for long.
    """
    removed = 0
    while True:
        step = int(client.xtrim(key, minid=minid, limit=TRIM_STEP))  # type: ignore[arg-type]
        removed += step
        if step == 0:
            break
    removed += int(client.xtrim(key, minid=minid, approximate=False))  # type: ignore[arg-type]
    return removed


def finish_landing(client: redis.Redis, partition: int, through: int) -> None:
    """Record the landed position and trim the log up to it, never past it."""
    keys = Keys(partition)
    current = int(client.get(keys.landed) or 0)
    if through > current:
        client.set(keys.landed, through)
    if through > 0:
        trim_stream(client, keys.log, f"{through + 1}-0")


def land_partitions(
    spark: SparkSession,
    client: redis.Redis,
    path: Path,
    landed: Mapping[int, int],
    partitions: int,
    *,
    after_commit: Callable[[int], None] | None = None,
    commit_bytes: int = LAND_COMMIT_BYTES,
) -> list[Landed]:
    """Land partitions ``0 .. partitions - 1``, whose Delta max positions are
    ``landed`` (absent: none), in as few commits as ``commit_bytes`` allows; each
    partition's log is recorded and trimmed only after the commit holding it."""
    through = {p: int(landed.get(p, 0)) for p in range(partitions)}
    done: list[Landed] = []
    group: list[tuple[int, int, int, list[bytes]]] = []  # partition, first, last
    held = 0

    def commit() -> None:
        nonlocal held
        if not group:
            return
        records = [r for *_, batch in group for r in batch]
        for partition, _, last, _ in group:
            through[partition] = last
        load_bronze(
            transform_records(records_frame(spark, records)),
            path,
            sum(through.values()),
        )
        for partition, _, _, _ in group:
            if after_commit is not None:  # test hook: crash between commit and trim
                after_commit(partition)
        for partition, first, last, _ in group:
            finish_landing(client, partition, last)
            done.append(Landed(partition, last, last - first + 1))
        group.clear()
        held = 0

    for partition in range(partitions):
        first, last, records = extract_log(client, partition, through[partition])
        if not first:
            finish_landing(client, partition, through[partition])
            done.append(Landed(partition, through[partition], 0))
            continue
        # Before the commit (after it the log may be trimmed): late-review records
        # join their season's review queue; copying twice is harmless.
        queue_late_reviews(client, records)
        group.append((partition, first, last, records))
        held += sum(map(len, records))
        if held >= commit_bytes:
            commit()
    commit()
    return sorted(done, key=lambda landed: landed.partition)


def run_land(
    settings: Settings,
    spark: SparkSession | None = None,
    *,
    after_commit: Callable[[int], None] | None = None,
) -> dict[int, int]:
    """Land every partition; returns the landed-through position per partition."""
    if spark is None:
        from jobs.spark import get_spark

        spark = get_spark("land")
    path = bronze_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    landed = extract_landed_through(spark, path)
    client = sync_client(resolve_redis_url(settings))
    try:
        done = land_partitions(
            spark,
            client,
            path,
            landed,
            settings.partitions,
            after_commit=after_commit,
        )
        return {d.partition: d.through for d in done}
    finally:
        client.close()
