"""Retention: which generations' segment directories a publish deletes.

The newest ``retained_generations`` stay, and so does every generation the speed
layer's partitions stand on (their base) or an award snapshot was taken from; a
generation that left the newest K stays ``RETENTION_GRACE_SECONDS`` more. When the
bases cannot be read, nothing is deleted.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterable
from datetime import datetime

from conf.settings import Settings
from jobs.tables import PublishedRow

log = logging.getLogger(__name__)

# A generation that left the newest K stays on disk this long: an API process maps
# the newest K as of its last scan (a few seconds old), so a page or pinned read it
# is serving from that generation finishes on files that still exist.
RETENTION_GRACE_SECONDS = 600


class RetentionUnsafe(RuntimeError):
    """What the speed layer stands on cannot be read: retention deletes nothing."""


def base_generations(settings: Settings) -> set[str]:
    """The base generation of every partition of the speed layer (``lb:{pN}:base``).

    :raises RetentionUnsafe: when Redis cannot be read.
    """
    import redis

    from speed.connection import sync_client
    from speed.partitions import Keys
    from speed.server import resolve_redis_url

    try:
        client = sync_client(resolve_redis_url(settings), socket_timeout=10)
        try:
            pipe = client.pipeline(transaction=False)
            for partition in range(settings.partitions):
                pipe.hget(Keys(partition).base_generation, "g")
            numbers = pipe.execute()
        finally:
            client.close()
    except (redis.RedisError, OSError, RuntimeError) as exc:
        raise RetentionUnsafe(f"cannot read the partitions' bases: {exc}") from exc
    return {f"g{int(n)}" for n in numbers if n is not None and int(n) > 0}


def protected_generations(settings: Settings) -> set[str]:
    """Generations retention must keep whatever their age.

    * every partition's base generation: live reads merge the speed layer's changes
      with exactly that generation, so removing it before the rebase onto a newer
      one would degrade every live read (issue 7, item 4);
    * award snapshots: the generations they were taken from
      (``serving.awards.award_generations``), kept forever.

    Pinned cursors are covered by :func:`apply_retention` itself: a cursor is honoured
    while its generation is one of the newest ``retained_generations`` (API.md), plus
    ``RETENTION_GRACE_SECONDS``.

    :raises RetentionUnsafe: when the bases cannot be read (then nothing is deleted).
    """
    from serving.awards import award_generations

    return base_generations(settings) | award_generations(settings.data_dir)


def _published_at(row: PublishedRow) -> float:
    try:
        text = json.loads(row.manifest_json)["publishedAt"]
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, KeyError, TypeError):
        return time.time()  # unknown: treat as just published (keeps it longer)


def apply_retention(
    settings: Settings,
    published: Iterable[PublishedRow],
    protected: set[str],
    now: float | None = None,
) -> list[str]:
    """Delete segment dirs older than the newest ``retained_generations``, except the
    ``protected`` ones and those that left the newest K less than
    ``RETENTION_GRACE_SECONDS`` ago (when the K-th newer generation was published)."""
    rows = sorted(published, key=lambda r: r.number)
    numbers = [(r.number, r.generation) for r in rows]
    retained = settings.retained_generations
    keep = {g for _, g in numbers[-retained:]} | protected
    now = time.time() if now is None else now
    for i, row in enumerate(rows):
        pushed_out_by = i + retained
        if pushed_out_by < len(rows) and (
            now - _published_at(rows[pushed_out_by]) < RETENTION_GRACE_SECONDS
        ):
            keep.add(row.generation)
    deleted = []
    for _, generation in numbers:
        directory = settings.segments_dir / generation
        if generation not in keep and directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
            deleted.append(generation)
    return deleted


def retain(settings: Settings, published: list[PublishedRow]) -> list[str]:
    """:func:`apply_retention` with the protected generations; deletes nothing when
    they cannot be read. Returns the deleted generations."""
    try:
        protected = protected_generations(settings)
    except RetentionUnsafe as exc:
        log.warning("retention skipped: %s", exc)
        return []
    return apply_retention(settings, published, protected)
