"""Shadow removal in the batch layer: generations publish without shadowed players.

The flags live in the speed layer (``lb:{pN}:flags``, written by the admin call);
each publish reads them once. Shadowed players are left out of the ranked snapshot
(gold and segments: top, others' ranks, nearby, entries, histogram counts,
population), and their totals go to a small side file per board,
``<board>.hidden.arrow`` (written by :func:`serving.segments.write_hidden`), so their
own rank read can still answer as if they were present.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from conf.settings import Settings
from serving.segments import HIDDEN_SCHEMA as HIDDEN_SCHEMA
from serving.segments import write_hidden as write_hidden
from speed.connection import sync_client
from speed.partitions import Keys
from speed.server import resolve_redis_url


def extract_shadowed(settings: Settings) -> set[str]:
    """Every shadowed player, from the flags of all partitions."""
    client = sync_client(resolve_redis_url(settings))
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
