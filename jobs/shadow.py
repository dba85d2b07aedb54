"""Shadow removal in the batch layer: generations publish without shadowed players.

The flags live in the speed layer (``lb:{pN}:flags``, written by the admin call);
each publish reads them once. Shadowed players are left out of the ranked snapshot
(gold and segments: top, others' ranks, nearby, entries, histogram counts,
population), and their totals go to a small side file per board,
``<board>.hidden.arrow`` (``player_id``, ``score``, sorted by player id), so their own
rank read can still answer as if they were present.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import redis
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from conf.settings import Settings
from speed.partitions import Keys
from speed.server import resolve_redis_url

HIDDEN_SCHEMA = pa.schema([("player_id", pa.string()), ("score", pa.int64())])


def extract_shadowed(settings: Settings) -> set[str]:
    """Every shadowed player, from the flags of all partitions."""
    client = redis.Redis.from_url(resolve_redis_url(settings))
    try:
        pipe = client.pipeline(transaction=False)
        for partition in range(settings.partitions):
            pipe.hgetall(Keys(partition).flags)
        shadowed: set[str] = set()
        for flags in pipe.execute():
            shadowed |= {p.decode() for p, f in flags.items() if f == b"shadow"}
        return shadowed
    finally:
        client.close()


def transform_public(totals: DataFrame, shadowed: Iterable[str]) -> DataFrame:
    """Totals without the shadowed players."""
    hidden = sorted(shadowed)
    if not hidden:
        return totals
    return totals.where(~F.col("player_id").isin(hidden))


def hidden_from(
    silver_totals: DataFrame, gold: DataFrame, generation: str
) -> list[tuple[str, str, int]]:
    """(board, player_id, score) of the players silver holds but the generation's
    gold left out: the shadowed ones (the publish reads the flags once, when it
    ranks; this finds exactly whom that left out)."""
    public = gold.where(F.col("generation") == generation).select("board", "player_id")
    rows = (
        silver_totals.join(public, ["board", "player_id"], "left_anti")
        .select("board", "player_id", "score")
        .collect()
    )
    return [(r["board"], r["player_id"], int(r["score"])) for r in rows]


def write_hidden(
    rows: Iterable[tuple[str, str, int]],
    directory: Path,
    boards: dict[str, dict[str, Any]],
) -> None:
    """Write ``<board>.hidden.arrow`` per board and list it in ``boards`` (the
    manifest's map). A board whose players are all hidden gets an empty public
    segment entry so the side file has a home."""
    by_board: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for board, player, score in rows:
        by_board[board].append((player, score))
    for board, items in sorted(by_board.items()):
        items.sort(key=lambda item: item[0].encode("utf-8"))
        table = pa.table(
            [
                pa.array([p for p, _ in items], pa.string()),
                pa.array([s for _, s in items], pa.int64()),
            ],
            schema=HIDDEN_SCHEMA,
        )
        name = f"{board}.hidden.arrow"
        with pa.OSFile(str(directory / name), "wb") as sink:
            with ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        digest = hashlib.sha256((directory / name).read_bytes()).hexdigest()
        meta = boards.get(board)
        if meta is None:
            # Every player of the board is hidden: the public side is empty.
            from jobs.publish import write_board_segment

            sums = write_board_segment(
                directory, board, pa.array([], pa.string()), pa.array([], pa.int64()), 1
            )
            meta = boards[board] = {
                "population": 0,
                "file": f"{board}.arrow",
                "index": f"{board}.index.arrow",
                "buckets": f"{board}.buckets.arrow",
                "sha256": sums[f"{board}.arrow"],
                "checksums": sums,
            }
        meta["hidden"] = name
        meta["checksums"][name] = digest
